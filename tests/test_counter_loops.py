"""Counter loops and blocks registered one by one (issue 12: loop shapes of third-party DiT code).

- `i = 0; while i < len(self.layers): h = self.layers[i](h, c); i += 1` (or `i < <size>`) is
  read as `for i in range(...)`: lists, pattern, PatchFunctor reasons, CP and TP plans are those
  of the equivalent `for`, and the generated standalone module reproduces the model under
  cache-dit with caching engaged (the size bound is rewritten to the list's length in the
  forward copy; without the copy the cached run fails).
- A `while` whose equality with a positional loop is not provable (`i += 2`, a `break`, ...)
  keeps the "no block list" error, naming the loop, its line and why.
- Blocks registered with `setattr(self, f"block_{i}", ...)` and run with `getattr`: the error
  names both lines and why cache-dit needs an nn.ModuleList.

Invented fixture: `tests/fixtures/models/third_party/counter_loop_dit.py`.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import AnalysisError, analyze_path
from lsp_server.analysis.block_loops import header_bindings, loop_bindings
from tests.conftest import FIXTURES
from tests.module_loading import load_module
from tests.transformer_cache_runs import (
    assert_caches_exactly,
    generate_standalone,
    run_cached,
    seeded_model,
    tokens,
    without,
)

COUNTER = FIXTURES / "models" / "third_party" / "counter_loop_dit.py"
WHILE_CLASSES = ["WhileLenDiT", "WhileDepthDiT", "WhileGainDiT", "WhileDualDiT"]
# `i = 0` / `while i < <bound>:` / body / `i += 1` (or `i = i + 1`) in a method body
_COUNTER_LOOP = re.compile(
    r"^( {8,})(\w+) = 0\n\1while \2 < (.+):\n((?:\1    .*\n)*?)\1    \2 (?:\+= 1|= \2 \+ 1)\n",
    re.M,
)


def _as_for_loops(text: str) -> str:
    """The fixture with each counter loop written as its `for i in range(<bound>)`."""
    out, count = _COUNTER_LOOP.subn(lambda m: f"{m[1]}for {m[2]} in range({m[3]}):\n{m[4]}", text)
    assert count == 5, count  # WhileLenDiT, WhileDepthDiT, WhileGainDiT, WhileDualDiT's two
    return out


def _comparable(value: Any) -> Any:
    """The analysis JSON without line numbers (the `while` form has two more lines)."""
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items() if k not in ("line", "blockClassLine")}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    if isinstance(value, str):
        return re.sub(r"line \d+|\.py:\d+", "line N", value)
    return value


# --- the loop header ----------------------------------------------------------------------------


def _while_of(source: str) -> tuple[ast.While, ast.FunctionDef]:
    func = ast.parse(textwrap.dedent(source)).body[0]
    assert isinstance(func, ast.FunctionDef)
    loop = next(n for n in ast.walk(func) if isinstance(n, ast.While))
    return loop, func


@pytest.mark.parametrize(
    ("header", "step", "how", "bound"),
    [
        ("while i < len(self.blocks):", "i += 1", "range", None),
        ("while i < self.depth:", "i = i + 1", "range_bound", "self.depth"),
        ("while i < self.config.num_layers:", "i = 1 + i", "range_bound", "self.config.num_layers"),
    ],
)
def test_a_counter_loop_binds_like_its_for_loop(
    header: str, step: str, how: str, bound: str | None
) -> None:
    loop, func = _while_of(
        f"def forward(self, x):\n    i = 0\n    {header}\n"
        f"        x = self.blocks[i](x)\n        {step}\n    return x\n"
    )
    bindings, others, counter = header_bindings(loop, func, {})
    assert counter is not None and counter.index == "i" and counter.step is loop.body[-1]
    assert [(b.attr, b.block_var, b.how) for b in bindings] == [("blocks", None, how)]
    assert (ast.unparse(bindings[0].bound) if bindings[0].bound else None) == bound
    assert others == ["i"]
    for_loop = ast.parse(
        f"for i in range({header[len('while i < ') : -1]}):\n    x = self.blocks[i](x)"
    )
    assert isinstance(for_loop.body[0], ast.For)
    expected, expected_others = loop_bindings(for_loop.body[0])
    assert [(b.attr, b.how) for b in expected] == [(b.attr, b.how) for b in bindings]
    assert expected_others == others


@pytest.mark.parametrize("cls", WHILE_CLASSES)
def test_counter_loops_analyse_as_their_for_loops(cls: str) -> None:
    """Everything the analysis says of the `while` model is what it says of the same model
    written with `for` (lines aside; a `loop_bound` reason quotes the loop's own header)."""
    got = analyze_path(COUNTER, cls, registry=False).to_json()["transformers"][0]
    text = _as_for_loops(COUNTER.read_text())
    expected = analyze_path(COUNTER, cls, text=text, registry=False).to_json()["transformers"][0]
    assert [r["kind"] for r in got["patchFunctor"]["reasons"]] == [
        r["kind"] for r in expected["patchFunctor"]["reasons"]
    ]
    for key in ("blockLists", "otherBlockLists", "contextParallel", "tensorParallel"):
        assert _comparable(got[key]) == _comparable(expected[key]), key
    lists = [(b["attr"], b["forwardPattern"], b["blockCount"]) for b in got["blockLists"]]
    assert (
        lists
        == {
            "WhileLenDiT": [("layers", "Pattern_3", 3)],
            "WhileDepthDiT": [("layers", "Pattern_3", 3)],
            "WhileGainDiT": [("layers", "Pattern_3", 3)],
            "WhileDualDiT": [("joint_layers", "Pattern_0", 2), ("single_layers", "Pattern_3", 2)],
        }[cls]
    )
    assert got["contextParallel"]["approach"] == "root_split"
    assert got["tensorParallel"]["layers"]  # a TP plan, equal to the for loop's (above)
    kinds = [r["kind"] for r in got["patchFunctor"]["reasons"]]
    assert kinds == {
        "WhileDepthDiT": ["loop_bound"],
        "WhileGainDiT": ["loop_bound", "loop_index_dependent"],
    }.get(cls, [])
    if kinds:
        reason = got["patchFunctor"]["reasons"][0]
        assert reason["message"].startswith("`while layer < self.num_layers` over")


@pytest.mark.parametrize(
    ("loop", "expected"),
    [
        (
            "i = 0\nwhile i < len(self.blocks):\n    x = self.blocks[i](x, g[i])\n    i += 1",
            "i = 0\nfor i, block in enumerate(self.blocks):\n    x = block(x, g[i])",
        ),
        (
            "for i in range(len(self.blocks)):\n    x = self.blocks[i](x, g[i])",
            "for i, block in enumerate(self.blocks):\n    x = block(x, g[i])",
        ),
        # not the same loop: a block picked by another index, a counter stepped by 2, a size
        # bound the forward copy did not rewrite, a `for` over the list already there
        (
            "for i in range(len(self.blocks)):\n    x = self.blocks[i](x) + self.blocks[i + 1](x)",
            None,
        ),
        ("i = 0\nwhile i < len(self.blocks):\n    x = self.blocks[i](x)\n    i += 2", None),
        ("for i in range(self.depth):\n    x = self.blocks[i](x)", None),
        (
            "for i in range(len(self.blocks)):\n    x = self.blocks[i](x)\n"
            "for b in self.blocks:\n    x = b(x)",
            None,
        ),
    ],
)
def test_the_step_transformation_reads_indexed_loops_as_enumerate(
    loop: str, expected: str | None
) -> None:
    from lsp_server.codegen.indexed_loops import as_enumerate

    body = textwrap.indent(loop, "    ")
    func = ast.parse(f"def forward(self, x, g):\n{body}\n    return x\n").body[0]
    assert isinstance(func, ast.FunctionDef)
    got = ast.unparse(as_enumerate(func, "blocks", "block"))
    want = f"def forward(self, x, g):\n{textwrap.indent(expected or loop, '    ')}\n    return x"
    assert got == want


# --- while loops that are not read --------------------------------------------------------------

_LEN_LOOP = (
    "        i = 0\n"
    "        while i < len(self.layers):\n"
    "            h = self.layers[i](h, temb)\n"
    "            i += 1\n"
    "        return self.proj_out(h)\n"
)


@pytest.mark.parametrize(
    ("changed", "why"),
    [
        (
            _LEN_LOOP.replace("i += 1", "i += 2"),
            "its body does not end by adding 1 to `i` (`i += 2`)",
        ),
        (
            _LEN_LOOP.replace(
                "            i += 1",
                "            if i > 1:\n                break\n            i += 1",
            ),
            "it has a `break` (line +3)",
        ),
        (
            _LEN_LOOP.replace(
                "            i += 1",
                "            if i > 1:\n                continue\n            i += 1",
            ),
            "it has a `continue` (line +3)",
        ),
        (
            _LEN_LOOP.replace("i = 0", "i = 1"),
            "`i` is set by `i = 1` (line -1) before it, not to 0",
        ),
        (
            _LEN_LOOP.replace("        i = 0\n", "        i = 0\n        i, h = h.shape[0], h\n"),
            "`i` is set by `i, h = (h.shape[0], h)` (line -1)",
        ),
        (
            _LEN_LOOP.replace("i < len(self.layers)", "i <= len(self.layers) - 1"),
            "its condition `i <= len(self.layers) - 1` is not",
        ),
        (
            _LEN_LOOP.replace("return self.proj_out(h)", "return self.proj_out(h) * i"),
            "`i` is read after the loop (line +3)",
        ),
        (
            _LEN_LOOP.replace(
                "h = self.layers[i](h, temb)",
                "h = self.layers[i](h, temb)\n            i = min(i, 2)",
            ),
            "`i` is also written at line +2",
        ),
        (
            _LEN_LOOP.replace("i < len(self.layers)", "i < len(self.layers) - h.shape[0]"),
            "its bound `len(self.layers) - h.shape[0]` is not a length or a size",
        ),
        (
            _LEN_LOOP.replace(
                "            i += 1\n", "            i += 1\n        else:\n            h = -h\n"
            ),
            "it has an `else:` branch",
        ),
    ],
)
def test_a_while_loop_that_is_not_provably_positional_is_named(changed: str, why: str) -> None:
    text = COUNTER.read_text()
    assert _LEN_LOOP in text
    text = text.replace(_LEN_LOOP, changed)
    line = 1 + text.splitlines().index("        while " + changed.split("while ")[1].split("\n")[0])
    with pytest.raises(AnalysisError) as info:
        analyze_path(COUNTER, "WhileLenDiT", text=text, registry=False)
    message = info.value.message
    assert "WhileLenDiT has no nn.ModuleList of blocks that forward runs" in message
    head = changed.split("while ")[1].split("\n")[0]
    why = re.sub(r"line ([+-]\d+)", lambda m: f"line {line + int(m[1])}", why)  # from the loop
    assert (
        f"`while {head}` (line {line}) runs it but is not read as a loop over the list: {why}"
        in message
    ), message
    assert "hands it to `len(...)`" not in message  # a length read runs nothing


def test_the_counter_loop_is_read_as_written_not_only_as_the_fixture_writes_it() -> None:
    """Statements between the counter's `= 0` and the loop, an annotated counter, the loop in a
    helper method of forward: still the `for` loop's lists."""
    text = COUNTER.read_text().replace(
        _LEN_LOOP,
        "        return self._run(h, temb)\n\n"
        "    def _run(self, h: Tensor, temb: Tensor) -> Tensor:\n"
        "        i: int = 0\n"
        "        h = h * 1.0\n"
        "        while i < len(self.layers):\n"
        "            h = self.layers[i](h, temb)\n"
        "            i += 1\n"
        "        return self.proj_out(h)\n",
    )
    (t,) = analyze_path(COUNTER, "WhileLenDiT", text=text, registry=False).transformers
    assert [(b.attr, b.forward_pattern) for b in t.block_lists] == [("layers", "Pattern_3")]
    assert not t.patch_functor_needed


# --- blocks registered one by one -----------------------------------------------------------------


@pytest.mark.parametrize(
    "register",
    [
        'setattr(self, f"block_{i}", CounterBlock(dim, heads))',
        'self.add_module(f"block_{i}", CounterBlock(dim, heads))',
    ],
)
def test_blocks_registered_by_name_are_named_in_the_error(register: str) -> None:
    text = COUNTER.read_text().replace(
        'setattr(self, f"block_{i}", CounterBlock(dim, heads))', register
    )
    lines = text.splitlines()
    registered = 1 + next(k for k, s in enumerate(lines) if register in s)
    fetched = 1 + next(k for k, s in enumerate(lines) if 'getattr(self, f"block_{i}")' in s)
    with pytest.raises(AnalysisError) as info:
        analyze_path(COUNTER, "SetattrDiT", text=text, registry=False)
    message = info.value.message
    assert f"(line {registered}) registers CounterBlock blocks one by one" in message, message
    assert f"forward runs them with `getattr(self, f'block_{{i}}')` (line {fetched})" in message
    assert "cache-dit caches an nn.ModuleList that forward runs block by block" in message


# --- the generated module under cache-dit ---------------------------------------------------------


def _context() -> tuple[Any, ...]:
    import torch

    return (torch.randn(1, 5, 8, generator=torch.Generator().manual_seed(3)),)


@pytest.mark.parametrize("cls", WHILE_CLASSES)
def test_the_generated_module_reproduces_the_model_under_cache_dit(
    cls: str, tmp_path: Path
) -> None:
    """No-cache control bit-identical to the plain model, forced caching changes the output."""
    pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    assert generate_standalone(COUNTER, cls, tmp_path)["refused"] == []
    path = tmp_path / f"{cls.lower()}_integration.py"
    module = load_module(f"{cls.lower()}_integration", path)
    extra = _context if cls == "WhileDualDiT" else (lambda: ())
    assert_caches_exactly(
        module, lambda: seeded_model(COUNTER, cls, "counter_loop_dit"), tokens, extra
    )
    text = path.read_text()
    if cls == "WhileDepthDiT":
        assert "    while layer < len(self.layers):\n" in text  # the copy's bound
    elif cls == "WhileGainDiT":  # the loop became per-block steps
        assert "    for block in self.layers:\n        h = block(h, temb=temb)\n" in text
        assert "    h = type(step).forward(step, h, temb * self.gains[layer])\n" in text
    else:
        assert "_patched_forward" not in text  # the loop runs the wrapper once, as it is


def test_without_the_forward_copy_the_size_bound_fails_under_cache_dit(tmp_path: Path) -> None:
    """Control: the same module with the functor's forward swap skipped runs the model's own
    `while layer < self.num_layers` over the one-wrapper list."""
    pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    generate_standalone(COUNTER, "WhileDepthDiT", tmp_path)
    skipped = without(
        tmp_path / "whiledepthdit_integration.py",
        "transformer.forward = _patched_forward.__get__(transformer)",
        "whiledepthdit_without_copy",
    )
    model = seeded_model(COUNTER, "WhileDepthDiT", "counter_loop_dit")
    with pytest.raises(IndexError):
        run_cached(skipped, model, 1e-12)


@pytest.mark.parametrize("form", ["while", "for"])
def test_per_block_work_of_an_indexed_loop_moves_into_steps(form: str, tmp_path: Path) -> None:
    """`h = self.layers[layer](h, temb * self.gains[layer])`, as a counter `while` or as
    `for layer in range(self.num_layers)`: the copy loops over the list and each block's step
    scales its own conditioning; caching reproduces the model. Control: without the steps
    installed the blocks all get the unscaled conditioning (wrong before anything is cached)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    source = COUNTER
    if form == "for":
        source = tmp_path / "counter_loop_for.py"
        source.write_text(_as_for_loops(COUNTER.read_text()))
    assert generate_standalone(source, "WhileGainDiT", tmp_path)["refused"] == []
    path = tmp_path / "whilegaindit_integration.py"
    module = load_module(f"whilegaindit_{form}_integration", path)
    model = lambda: seeded_model(COUNTER, "WhileGainDiT", "counter_loop_dit")  # noqa: E731
    baseline = assert_caches_exactly(module, model, tokens)
    skipped = without(
        path, "block.forward = _layers_step.__get__(block)", f"whilegaindit_{form}_without_steps"
    )
    control = run_cached(skipped, model(), 1e-12)
    assert (control[0] - baseline[0]).abs().max().item() > 1e-3
    assert torch.is_tensor(control[0])
