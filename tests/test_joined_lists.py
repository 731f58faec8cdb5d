"""Block lists run back to back with the same call are cached as one list (as cache-dit's own
Flux adapter does): one residual check per step instead of one per list.

The analysis marks a list whose loop directly continues the previous cached list's loop with the
same block call (`continues`); the adapter then passes `blocks=a + b`, `blocks_name="a"`,
`dummy_blocks_names=["b"]`. Invented `relay_pair_dit.py` (two block classes) joins; a statement
between the loops, or another argument for the second list, does not. Under cache-dit the joined
integration reproduces the model with nothing cached, and caches every block of both lists as
one unit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from lsp_server.codegen import build_plan, generate, parse_plan, write
from tests.conftest import FIXTURES, diffusers_file
from tests.module_loading import load_module

RELAY = FIXTURES / "models" / "relay_pair_dit.py"


def _lists(path: Path, cls: str) -> list[tuple[str, str | None]]:
    (t,) = analyze_path(path, cls, registry=False).transformers
    return [(b.attr, b.continues) for b in t.block_lists]


@pytest.mark.parametrize(
    ("cls", "expected"),
    [
        ("RelayPairDiT", [("coarse_blocks", None), ("fine_blocks", "coarse_blocks")]),
        ("RelayPairGapDiT", [("coarse_blocks", None), ("fine_blocks", None)]),
        ("RelayPairArgsDiT", [("coarse_blocks", None), ("fine_blocks", None)]),
    ],
)
def test_lists_run_back_to_back_with_the_same_call_continue(cls: str, expected: list) -> None:
    assert _lists(RELAY, cls) == expected


def test_flux_single_blocks_continue_the_double_blocks() -> None:
    flux = diffusers_file("models/transformers/transformer_flux.py")
    assert _lists(flux, "FluxTransformer2DModel") == [
        ("transformer_blocks", None),
        ("single_transformer_blocks", "transformer_blocks"),
    ]


def _generated(tmp_path: Path, cls: str) -> Any:
    analysis = analyze_path(RELAY, cls, registry=False)
    target = tmp_path / f"cdit_{cls.lower()}.py"
    plan, errors = parse_plan(
        build_plan(analysis.to_json(), {"target": {"kind": "standalone", "path": str(target)}})
    )
    assert plan is not None, errors
    write(generate(plan, manifest_path=tmp_path / ".cdit" / "generated.json"))
    return target


def test_the_adapter_joins_the_lists(tmp_path: Path) -> None:
    text = _generated(tmp_path, "RelayPairDiT").read_text()
    assert "blocks=transformer.coarse_blocks + transformer.fine_blocks" in text
    assert 'blocks_name="coarse_blocks"' in text
    assert 'dummy_blocks_names=["fine_blocks"]' in text
    gap = _generated(tmp_path, "RelayPairGapDiT").read_text()
    assert "dummy_blocks_names" not in gap
    assert "blocks=[transformer.coarse_blocks, transformer.fine_blocks]" in gap


def test_joined_lists_under_cache_dit(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    cache_dit = pytest.importorskip("cache_dit")

    module = load_module(f"cdit_relay_{abs(hash(tmp_path))}", _generated(tmp_path, "RelayPairDiT"))
    fixture = load_module("relay_pair_dit", RELAY)

    def run(threshold: float) -> tuple[list[float], Any]:
        torch.manual_seed(0)
        model = fixture.RelayPairDiT().eval()
        inputs = {"hidden_states": torch.randn(2, 6, 4), "timestep": torch.tensor([10.0, 500.0])}
        with torch.no_grad():
            baseline = model(**inputs)
        module.enable(
            None,
            transformer=model,
            cache_config=cache_dit.DBCacheConfig(
                num_inference_steps=3,
                Fn_compute_blocks=1,
                Bn_compute_blocks=0,
                max_warmup_steps=0,
                residual_diff_threshold=threshold,
            ),
        )
        with torch.no_grad():
            diffs = [(model(**inputs) - baseline).abs().max().item() for _ in range(3)]
        cached = list(getattr(model, "_cached_steps", None) or [])
        cache_dit.disable_cache(model)
        return diffs, cached

    exact, cached = run(1e-12)
    # nothing cached on the first call: both lists ran once, in order, as one list
    assert exact[0] == 0.0, exact
    loose, cached = run(10.0)
    assert cached, "a loose threshold caches the joined list"
    assert loose[0] == 0.0 and max(loose) < 1e-4, loose  # identical inputs: the same residual
