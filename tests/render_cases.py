"""Helpers for the per-renderer before/after tests (`tests/test_render_*.py`).

Each renderer (or source transformation) is called directly with the smallest plan or source
that exercises one rule, and its text is compared with the exact expected text, in the style of
`libcst.codemod.CodemodTest.assertCodemod`: a mismatch fails with a unified diff (expected ->
produced), and every produced text must parse. `acme_plan` builds a minimal `IntegrationPlan`
from the dataclasses (no JSON, no analysis, no files).
"""

from __future__ import annotations

import ast
import difflib
import textwrap
from dataclasses import replace
from typing import Any

import libcst as cst
import pytest

from lsp_server.codegen.plan import (
    BlockListPlan,
    CachePlan,
    ComponentPlan,
    ContextParallelPlan,
    ExamplePlan,
    IntegrationPlan,
    ModelInfo,
    Sources,
    Target,
    TensorParallelPlan,
)

WIDTH = 79  # PEP 8: the standalone module's default width
SPLIT = {"split_dim": 1, "expected_dims": 3}
GATHER = {"gather_dim": 1, "expected_dims": 3}


def code(text: str) -> str:
    """A dedented triple-quoted block without its first newline (trailing newline kept)."""
    return textwrap.dedent(text).lstrip("\n")


def _diff(expected: str, produced: str) -> str:
    return "".join(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            produced.splitlines(keepends=True),
            "expected",
            "produced",
        )
    )


def _parse(source: str) -> None:
    compile(source, "<generated>", "exec", dont_inherit=True)
    cst.parse_module(source)


def assert_parses(text: str) -> None:
    """`text` is valid Python for CPython and libcst, as `edits.check_parses` demands of every
    written file: a module, or (dedented) the statements of a function body."""
    source = textwrap.dedent(text)
    try:
        _parse(source)
    except (SyntaxError, cst.ParserSyntaxError):
        try:
            _parse("def _fragment():\n" + textwrap.indent(source, "    "))
        except (SyntaxError, cst.ParserSyntaxError) as exc:
            pytest.fail(f"generated text does not parse: {exc}\n{text}")


def assert_code(produced: str, expected: str, *, parses: bool = True) -> None:
    """`produced` equals `expected` exactly (a unified diff on failure) and parses."""
    if produced != expected:
        pytest.fail("generated text differs:\n" + _diff(expected, produced))
    if parses:
        assert_parses(produced)


def assert_lines(produced: list[str], expected: str) -> None:
    """Generated lines (a fragment) equal the lines of `expected`, and parse."""
    assert_code("\n".join(produced) + "\n", expected)


def delta(before: str, after: str) -> str:
    """What a rule changes: the unified diff of two renderings with one line of context, hunk
    headers reduced to `@@` (so the expected text names lines, not line numbers) and blank
    context lines left empty (as a dedented expected block has them)."""
    lines = list(
        difflib.unified_diff(before.splitlines(True), after.splitlines(True), "a", "b", n=1)
    )
    out = []
    for line in lines[2:]:
        if line.startswith("@@"):
            line = "@@\n"
        elif line.strip() == "":
            line = "\n"
        out.append(line)
    return "".join(out)


def assert_delta(before: str, after: str, expected: str) -> None:
    """The change from `before` to `after` is exactly `expected` (a `delta`); `after` parses."""
    produced = delta(before, after)
    if produced != expected:
        pytest.fail("the rule changes other lines:\n" + _diff(expected, produced))
    assert_parses(after)


def top_level(source: str, name: str) -> str:
    """The source of the top-level definition or assignment of `name` (decorators included)."""
    lines = source.splitlines(keepends=True)
    for node in ast.parse(source).body:
        names: list[str] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        if name in names:
            decorators = getattr(node, "decorator_list", [])
            start = min([node.lineno, *(d.lineno for d in decorators)])
            return "".join(lines[start - 1 : node.end_lineno])
    raise AssertionError(f"{name} is not defined at the top of the generated text")


def top_level_names(source: str) -> list[str]:
    """Names defined or assigned at the top of `source`, in order."""
    out: list[str] = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            out.append(node.name)
        elif isinstance(node, ast.Assign):
            out += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.append(node.target.id)
    return out


def run_generated(source: str, **namespace: Any) -> dict[str, Any]:
    """Execute generated code in a fresh namespace (stand-ins for its imports given)."""
    scope: dict[str, Any] = {"Any": Any, **namespace}
    exec(compile(source, "<generated>", "exec", dont_inherit=True), scope)
    return scope


# ----------------------------------------------------------------------------- plans

MODEL = ModelInfo(
    transformer_class="AcmeTransformer2DModel",
    transformer_module="acme.transformer_acme",
    sources=Sources(transformer="/src/acme/transformer_acme.py"),
)


def acme_plan(
    *,
    block_lists: tuple[BlockListPlan, ...] = (BlockListPlan("blocks", "Pattern_3"),),
    cache: CachePlan | None = None,
    cp: ContextParallelPlan | None = None,
    tp: TensorParallelPlan | None = None,
    model: ModelInfo = MODEL,
    components: tuple[ComponentPlan, ...] = (),
    example: ExamplePlan | None = None,
    **model_changes: Any,
) -> IntegrationPlan:
    """The smallest plan: `AcmeTransformer2DModel` with one cached list `blocks` (Pattern_3),
    a standalone target, CP and TP disabled; each keyword replaces one part."""
    return IntegrationPlan(
        model=replace(model, **model_changes) if model_changes else model,
        register_name="Acme",
        model_slug="acme",
        target=Target(kind="standalone", path="/out/cdit_acme.py"),
        cache=cache or CachePlan(block_lists=block_lists),
        context_parallel=cp or ContextParallelPlan(),
        tensor_parallel=tp or TensorParallelPlan(),
        components=components,
        example=example,
    )


def cp_plan_of(plan: dict[str, Any], **changes: Any) -> ContextParallelPlan:
    """An enabled CP part with hook plan `plan`."""
    return ContextParallelPlan(enabled=True, approach="ulysses", plan=plan, **changes)


def tp_plan_of(layers: dict[str, str], **changes: Any) -> TensorParallelPlan:
    """An enabled TP part with layer styles `layers`."""
    return TensorParallelPlan(enabled=True, layers=layers, **changes)
