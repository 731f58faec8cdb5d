"""Copy a transformer's `forward` out of its source with the PatchFunctor fixes applied (libcst).

Under caching cache-dit swaps each cached block list for a one-element list and re-calls blocks
positionally (facts §1.4, §1.9). Given the analysis reasons (kind + source line), the copy gets:

* `block_list_access`: `self.<list>[k]` / `len(self.<list>)` read the real blocks from
  `self._cdit_blocks["<list>"]` (the functor stores them before caching swaps the list);
* `keyword_binding`: the block call passes the block's leading parameters positionally, so the
  positional re-call binds them to the same parameters;
* `loop_invariant`: statements at the top of the loop body move in front of the loop, when no
  statement of that loop depends on the block index;
* `loop_index_dependent`, `per_block_work`, `per_block_exchange`: the loop over that list becomes
  per-block steps (`block_steps`): each block's forward runs the loop body with its own index
  (with values passed between blocks, `enable()` also refuses `Bn_compute_blocks > 0`);
* `keyword_only_streams`: blocks that take their streams only by keyword: the loop becomes
  per-block steps too (a step takes the streams positionally and makes the original call);
* `block_output_access`: the loop keeps a part of the block's output (`block(x)["x"]`): per-block
  steps as well (a step makes the original call and returns the streams);
* `interleaved_lists`: lists run by one `zip` loop: the loop becomes per-block steps of the first
  list, each also running block k of the others;
* `stream_order`: the block takes the denoised stream second: per-block steps that take the two
  streams the other way round (the analysis reports the list's pattern through them);
* anything else (fixes that do not apply): the statement stays where it is, under
  a `# CDIT-REVIEW(<kind>)` comment, and the PatchFunctor is refused (`render_functor`).

Every change is marked with a `# CDIT:` comment. The result is a module-level function named
`_patched_forward` (same signature and decorators) plus the import lines its free names need,
resolved against the source module (relative imports made absolute).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from .block_steps import BLOCKS_ATTR, StepError, Steps, transform
from .forward_imports import imports_for
from .forward_rewriter import TWO_STREAM, Fixes, ForwardRewriter, with_docstring
from .plan import BlockListPlan, FunctorReason

PATCHED_NAME = "_patched_forward"
# reasons whose list's loop becomes per-block steps (index-dependent work, zipped lists)
EXCHANGE = "per_block_exchange"  # values passed between blocks: steps, and no trailing blocks
_STEP_KINDS = (
    "loop_index_dependent",
    "per_block_work",
    EXCHANGE,
    "interleaved_lists",
    "keyword_only_streams",
    "block_output_access",
    "stream_order",
)


def exchanging_lists(reasons: Sequence[FunctorReason]) -> list[str]:
    """Lists whose blocks pass values to later blocks (`per_block_exchange`): caching them is
    right only while no block runs after a skipped one (`Bn_compute_blocks=0`)."""
    return sorted({r.block_list or "?" for r in reasons if r.kind == EXCHANGE})


__all__ = [
    "BLOCKS_ATTR",
    "PATCHED_NAME",
    "ForwardCopyError",
    "PatchedForward",
    "block_forward_params",
    "copy_forward",
]


class ForwardCopyError(Exception):
    """The forward could not be located or copied; the functor stays a skeleton."""


@dataclass
class PatchedForward:
    code: str  # module-level `def _patched_forward(...)`, 4-space indentation
    imports: list[str]  # import statements its free names need
    applied: list[str] = field(default_factory=list)  # one line per automatic change
    review: list[str] = field(default_factory=list)  # one line per item left for review
    block_refs: list[str] = field(default_factory=list)  # lists to keep in `_cdit_blocks`
    steps: list[Steps] = field(default_factory=list)  # lists whose loop became per-block steps
    source_line: int = 0
    method: str = "forward"  # the method copied: forward, or the helper of it running the loops


def copy_forward(
    source: str,
    class_name: str,
    module_name: str,
    reasons: Sequence[FunctorReason],
    block_lists: Sequence[BlockListPlan],
    block_params: dict[str, list[str]] | None = None,
) -> PatchedForward:
    """The patched copy of `class_name.forward` from `source` (text of module `module_name`)."""
    module, forward, positions = _locate_forward(source, class_name, reasons)
    lists = {b.attr: b for b in block_lists}
    index_dependent = {r.block_list for r in reasons if r.kind in _STEP_KINDS and r.block_list}
    fixes = _fixes(reasons, index_dependent)
    rewriter = ForwardRewriter(
        positions=positions,
        lists=lists,
        fixes=fixes,
        block_params=block_params or {},
        class_name=class_name,
    )
    new_forward = forward.visit(rewriter)
    assert isinstance(new_forward, cst.FunctionDef)
    new_forward = with_docstring(
        new_forward.with_changes(name=cst.Name(PATCHED_NAME), leading_lines=()),
        '"""Patched copy of the transformer\'s forward (changes marked `CDIT`)."""',
    )
    # libcst renders a nested node relative to its own indentation (string contents excepted)
    code = module.code_for_node(new_forward).lstrip("\n")
    review = list(rewriter.review)
    reordered = frozenset(r.block_list or "" for r in reasons if r.kind == "stream_order")
    code, steps = _per_block_steps(
        code, sorted(index_dependent), lists, block_params or {}, review, reordered
    )
    functions = "\n\n".join(s.function for s in steps)
    return PatchedForward(
        code=code,
        imports=imports_for(code + "\n" + functions, source, module_name, class_name),
        applied=rewriter.applied
        + [f"`{s.attr}`: {_step_work(s.attr, reasons)} moved into {s.name}" for s in steps]
        + [_state_note(s) for s in steps if s.state_calls],
        review=review + _not_done(fixes, rewriter),
        block_refs=sorted(rewriter.block_refs.union(*(s.block_refs for s in steps))),
        steps=steps,
        source_line=positions[forward].start.line,
        method=forward.name.value,
    )


def _state_note(step: Steps) -> str:
    calls = ", ".join(f"`{c}`" for c in step.state_calls)
    return (
        f"`{step.attr}`: per-layer state {calls} runs in {step.name} with its block: a cached "
        "step skips it with the block (right for state written on computed steps only, such as a "
        "prefix KV cache filled on the first step; the cache phase's verdict judges the rest)"
    )


def _step_work(attr: str, reasons: Sequence[FunctorReason]) -> str:
    kinds = {r.kind for r in reasons if r.block_list == attr and r.kind in _STEP_KINDS}
    if kinds == {"keyword_only_streams"}:
        return "the block call (the block takes its streams only by keyword)"
    if kinds == {"block_output_access"}:
        return "the block call (the loop keeps a part of its output)"
    if kinds == {"per_block_work"}:
        return "per-block work on the stream"
    return "index-dependent loop work"


def _locate_forward(
    source: str, class_name: str, reasons: Sequence[FunctorReason] = ()
) -> tuple[cst.Module, cst.FunctionDef, Mapping[cst.CSTNode, CodeRange]]:
    """The parsed source, the method of `class_name` to copy and the source positions of its
    nodes: `forward`, or the helper method of the class holding every line the reasons name
    when they all lie in one (block loops run in `self.forward_orig(...)`)."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise ForwardCopyError(f"the transformer source does not parse: {exc}") from exc
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    cls = next(
        (s for s in module.body if isinstance(s, cst.ClassDef) and s.name.value == class_name),
        None,
    )
    if cls is None:
        raise ForwardCopyError(f"class {class_name} is not defined at the top of the source")
    positions = wrapper.resolve(PositionProvider)
    methods = [s for s in cls.body.body if isinstance(s, cst.FunctionDef)]
    lines = {r.line for r in reasons if r.line}
    holding = [
        m
        for m in methods
        if lines and all(positions[m].start.line <= n <= positions[m].end.line for n in lines)
    ]
    forward = next((m for m in methods if m.name.value == "forward"), None)
    if holding and (forward is None or holding[0] is not forward):
        return module, holding[0], positions
    if forward is None:
        raise ForwardCopyError(f"{class_name} does not define `forward` itself (inherited?)")
    return module, forward, positions


def _fixes(reasons: Sequence[FunctorReason], index_dependent: set[str | None]) -> Fixes:
    """The fixes by statement line. The loops of `index_dependent` lists become per-block steps
    (`block_steps`): their body stays as written (no hoisting or positional rewrite there)."""
    reasons = [
        r
        for r in reasons
        if r.block_list not in index_dependent
        or r.kind not in (*_STEP_KINDS, "loop_invariant", "keyword_binding")
    ]
    fixes = Fixes(
        access={r.line for r in reasons if r.kind == "block_list_access"},
        keyword={r.line: r for r in reasons if r.kind == "keyword_binding"},
        bound={r.line: r for r in reasons if r.kind == "loop_bound"},
        hoist={
            r.line
            for r in reasons
            if r.kind == "loop_invariant" and r.block_list not in index_dependent
        },
        review={},
    )
    for r in reasons:
        if r.kind == "loop_invariant" and r.block_list in index_dependent:
            fixes.review.setdefault(r.line, []).append(
                (r.kind, f"{r.message} (not hoisted: this loop also has index-dependent work)")
            )
        elif r.kind not in ("block_list_access", "keyword_binding", "loop_invariant", "loop_bound"):
            fixes.review.setdefault(r.line, []).append((r.kind, r.message))
    return fixes


def _per_block_steps(
    code: str,
    attrs: list[str],
    lists: dict[str, BlockListPlan],
    block_params: dict[str, list[str]],
    review: list[str],
    reordered: frozenset[str] = frozenset(),
) -> tuple[str, list[Steps]]:
    """`code` with the loop over each of `attrs` turned into per-block steps, and the steps; a
    loop that cannot be turned is left as it is, with why appended to `review`."""
    steps: list[Steps] = []
    for attr in attrs:
        plan = lists.get(attr)
        count = 2 if plan is not None and plan.forward_pattern in TWO_STREAM else 1
        try:
            params = block_params.get(attr, [])
            reorder = attr in reordered
            step = transform(code, attr, params, count, frozenset(lists), reorder)
        except (StepError, SyntaxError) as exc:
            review.append(f"`{attr}` has index-dependent loop work that cannot be moved: {exc}")
            continue
        code = step.code
        steps.append(step)
    return code, steps


def _not_done(fixes: Fixes, rewriter: ForwardRewriter) -> list[str]:
    """Review lines for the fixes whose statement the rewriter did not find or rewrite."""
    out: list[str] = []
    for line in sorted(set(fixes.review) - rewriter.review_done):
        for kind, message in fixes.review[line]:
            out.append(f"line {line} {kind}: {message} (statement not located)")
    for line in sorted(set(fixes.keyword) - rewriter.keyword_done):
        reason = fixes.keyword[line]
        out.append(f"line {line} keyword_binding: {reason.message} (not rewritten)")
    for line in sorted(set(fixes.bound) - rewriter.bound_done):
        out.append(f"line {line} loop_bound: {fixes.bound[line].message} (not rewritten)")
    return out


def block_forward_params(path: str, class_name: str, line: int | None = None) -> list[str] | None:
    """Named parameters (after self) of `class_name.forward` defined in `path`, in declared
    order: the positional ones, then the keyword-only ones."""
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and (
            node.name == class_name or (line is not None and node.lineno == line)
        ):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    args = item.args
                    names = [a.arg for a in [*args.posonlyargs, *args.args]][1:]
                    return names + [a.arg for a in args.kwonlyargs]
            return None
    return None
