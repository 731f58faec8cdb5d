"""Loops that do not run a list's blocks once each, first to last (invented variants of
plain_sdpa_dit.py): `reversed(self.layers)` / `self.layers[::-1]`, a block called twice per
iteration, an early `break`, the list run by two loops of one call. cache-dit's wrapper runs every
block once, first to last, and keeps one residual per list and step, so caching is refused
upfront; context parallelism too where the hook plan's first and last block are not the first
and last to run (each stopped on a shape at the first call on 2 gloo ranks). Before: generated,
and the reversed and twice-called variants ran wrong (no-cache control 7.6e3 and 2e6 off), the
early exit failed to generate ("'break' outside loop"). Calls in the two branches of an `if`
keep the plan. The control: the plain model's module on the reversed model runs and is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES
from tests.transformer_cache_runs import generate_standalone, run_cached, run_plain

PLAIN = FIXTURES / "models" / "plain_sdpa_dit.py"
LOOP = "        for layer in self.layers:\n            x = layer(x, c, ctx, cos, sin)\n"


def _variant(tmp_path: Path, loop: str) -> Path:
    text = PLAIN.read_text()
    assert LOOP in text
    path = tmp_path / "loop_dit.py"
    path.write_text(text.replace(LOOP, loop))
    return path


def _loop(*lines: str) -> str:
    return "".join(f"        {line}\n" for line in lines)


CASES = {
    "reversed": (
        _loop("for layer in reversed(self.layers):", "    x = layer(x, c, ctx, cos, sin)"),
        "reversed_loop",
        True,
    ),
    "negative_step": (
        _loop("for layer in self.layers[::-1]:", "    x = layer(x, c, ctx, cos, sin)"),
        "reversed_loop",
        True,
    ),
    "twice": (
        _loop(
            "for layer in self.layers:",
            "    x = layer(x, c, ctx, cos, sin)",
            "    x = layer(x, c, ctx, cos, sin)",
        ),
        "repeated_block_call",
        True,
    ),
    "early_exit": (
        _loop(
            "for i, layer in enumerate(self.layers):",
            "    x = layer(x, c, ctx, cos, sin)",
            "    if i == 1:",
            "        break",
        ),
        "early_exit",
        True,
    ),
    "two_loops": (
        LOOP + LOOP,
        "repeated_loops",
        False,  # each loop splits at its first block and gathers after its last: CP stays
    ),
    "index_after": (
        _loop(
            "for i, layer in enumerate(self.layers):",
            "    x = layer(x, c, ctx, cos, sin)",
            "x = x * (1 + i)",
        ),
        "loop_value_after",
        False,  # the hooks run on the real blocks: CP stays
    ),
    "block_after": (
        _loop(
            "for layer in self.layers:",
            "    x = layer(x, c, ctx, cos, sin)",
            "x = x + sum(p.sum() for p in layer.parameters())",
        ),
        "loop_value_after",
        False,
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_loops_that_do_not_run_each_block_once_in_order_refuse(tmp_path: Path, name: str) -> None:
    loop, kind, cp_refused = CASES[name]
    (t,) = analyze_path(_variant(tmp_path, loop), "PlainSdpaDiT", registry=False).to_json()[
        "transformers"
    ]
    assert kind in {r["kind"] for r in t["patchFunctor"]["reasons"]}
    assert (t["contextParallel"]["approach"] == "none") is cp_refused
    generate_standalone(_variant(tmp_path, loop), "PlainSdpaDiT", tmp_path)
    text = (tmp_path / "plainsdpadit_integration.py").read_text()
    assert kind in text  # the cache part's NOT_GENERATED reason


def test_calls_in_the_branches_of_one_if_keep_the_plan(tmp_path: Path) -> None:
    loop = _loop(
        "for i, layer in enumerate(self.layers):",
        "    if i % 2 == 0:",
        "        x = layer(x, c, ctx, cos, sin)",
        "    else:",
        "        x = layer(x, c, ctx, cos, cos)",
    )
    (t,) = analyze_path(_variant(tmp_path, loop), "PlainSdpaDiT", registry=False).to_json()[
        "transformers"
    ]
    kinds = {r["kind"] for r in t["patchFunctor"]["reasons"]}
    assert not kinds & {"repeated_block_call", "reversed_loop", "early_exit", "repeated_loops"}


def test_a_loop_name_bound_again_before_it_is_read_keeps_the_plan(tmp_path: Path) -> None:
    loop = _loop(
        "for i, layer in enumerate(self.layers):",
        "    x = layer(x, c, ctx, cos, sin)",
        "i = len(self.layers) - 1",
        "x = x * (1 + i)",
    )
    (t,) = analyze_path(_variant(tmp_path, loop), "PlainSdpaDiT", registry=False).to_json()[
        "transformers"
    ]
    assert "loop_value_after" not in {r["kind"] for r in t["patchFunctor"]["reasons"]}


def _model(path: Path, name: str) -> Any:
    import torch

    from tests.module_loading import load_module

    module = load_module(name, path)
    torch.manual_seed(0)
    model = module.PlainSdpaDiT(depth=4).eval()
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0, 0.3, generator=generator)
    return model


def test_the_in_order_module_on_the_reversed_model_is_wrong(tmp_path: Path) -> None:
    """Why the refusal: the plain model's module (whole-list adapter) on the reversed model."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    from tests.module_loading import load_module

    generate_standalone(PLAIN, "PlainSdpaDiT", tmp_path)
    module = load_module("plain_for_reversed", tmp_path / "plainsdpadit_integration.py")
    reversed_path = _variant(tmp_path, CASES["reversed"][0])

    def make() -> Any:
        return torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(1))

    def extra() -> tuple[Any, ...]:
        return torch.randn(1, 6, 16, generator=torch.Generator().manual_seed(2)), False

    baseline = run_plain(_model(reversed_path, "rev_a"), make, extra)
    control = run_cached(module, _model(reversed_path, "rev_b"), 1e-12, make, extra=extra)
    assert (control[0][0] - baseline[0][0]).abs().max().item() > 1.0


def test_the_plain_module_on_a_model_reading_the_index_after_its_loop_is_wrong(
    tmp_path: Path,
) -> None:
    """Why the refusal: the whole-list module on a model that reads the loop index after the
    loop, caching disabled (the no-cache control): the wrapper's one pass leaves `i` at 0."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    from tests.module_loading import load_module

    generate_standalone(PLAIN, "PlainSdpaDiT", tmp_path)
    module = load_module("plain_for_index_after", tmp_path / "plainsdpadit_integration.py")
    variant = _variant(tmp_path, CASES["index_after"][0])

    def make() -> Any:
        return torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(1))

    def extra() -> tuple[Any, ...]:
        return torch.randn(1, 6, 16, generator=torch.Generator().manual_seed(2)), False

    baseline = run_plain(_model(variant, "after_a"), make, extra)
    control = run_cached(module, _model(variant, "after_b"), 1e-12, make, extra=extra)
    assert (control[0][0] - baseline[0][0]).abs().max().item() > 1.0
