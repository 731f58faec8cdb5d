"""Per-layer state selected by the block index (`store.slot(i)`, diffusers QwenImage 2.1's
`kv_cache.get_layer(index_block)`) runs inside each block's step under cache-dit, and a stream
whose length changes between steps (the prefix served from that state after the first step)
is cached with its changed step computed.

`tests/fixtures/models/third_party/prefix_cache_dit.py`: the first call prepends 5 condition
tokens and each block keeps their keys and values in its slot; later calls run the 16 image
tokens against the slot. Controls: the step reading slot 0 for every block changes the no-cache
run; forcing caching without the computed step stops on cache-dit's residual of the old length.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdit_runtime.cache_stats import calibrate
from cdit_runtime.contract import CacheOptions
from tests.conftest import FIXTURES
from tests.module_loading import load_module
from tests.transformer_cache_runs import STEPS, generate_standalone, seeded_model

SOURCE = FIXTURES / "models" / "third_party" / "prefix_cache_dit.py"
OPTIONS = CacheOptions(max_warmup_steps=1, fn=1, bn=0)


def _generation(cls: str, tmp_path: Path) -> tuple[Any, Path, dict[str, Any]]:
    result = generate_standalone(SOURCE, cls, tmp_path)
    path = tmp_path / f"{cls.lower()}_integration.py"
    return load_module(f"{cls.lower()}_state", path), path, result


def _run(model: Any, fixture: Any) -> list[Any]:
    """One generation: `len(STEPS)` calls sharing one fresh store."""
    import torch

    tokens = torch.randn(1, 16, 4, generator=torch.Generator().manual_seed(1))
    cond = torch.randn(1, 5, 8, generator=torch.Generator().manual_seed(2))
    store = fixture.PrefixStore(len(model.blocks))
    with torch.no_grad():
        return [model(tokens, torch.tensor([t]), cond, store) for t in STEPS]


def _cached(module: Any, cls: str, config: Any) -> list[Any]:
    import cache_dit

    fixture = load_module("prefix_cache_dit", SOURCE)
    model = seeded_model(SOURCE, cls, "prefix_cache_dit")
    module.enable(None, transformer=model, cache_config=config)
    try:
        return _run(model, fixture)
    finally:
        cache_dit.disable_cache(model)


def _plain(cls: str) -> list[Any]:
    fixture = load_module("prefix_cache_dit", SOURCE)
    return _run(seeded_model(SOURCE, cls, "prefix_cache_dit"), fixture)


@pytest.mark.parametrize("cls", ["PrefixStoreDiT", "SlotLayerDiT"])
def test_per_layer_state_runs_in_each_blocks_step_under_cache_dit(cls: str, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    import torch

    from cdit_runtime.phases import cache_config

    module, _, result = _generation(cls, tmp_path)
    assert "cache" not in [r["part"] for r in result["refused"]]
    assert any("per-layer state `store.slot(" in a for a in result["applied"])
    baseline = _plain(cls)
    assert baseline[0].shape == baseline[-1].shape == (1, 16, 4)

    control = _cached(module, cls, cache_config(OPTIONS, len(STEPS), threshold=1e-12))
    assert all(torch.equal(c, b) for c, b in zip(control, baseline, strict=True))

    # forcing caching (threshold 1.0) skips cache-dit's shape check: step 1 would add the
    # first step's 21-token residual to 16 tokens, unless it is computed
    with pytest.raises(RuntimeError, match=r"size of tensor a \(21\)"):
        _cached(module, cls, cache_config(OPTIONS, len(STEPS), threshold=1.0))
    forced = _cached(module, cls, cache_config(OPTIONS, len(STEPS), 1.0, compute_steps=[1]))
    assert torch.equal(forced[1], baseline[1])  # computed
    assert (forced[-1] - baseline[-1]).abs().max().item() > 1e-3  # caching ran


def test_the_step_reading_one_slot_for_every_block_changes_the_control(tmp_path: Path) -> None:
    """Control: the state call is what makes the steps exact (every block reading slot 0, as
    cache-dit running the loop body once would hand them, changes the no-cache run)."""
    pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    import torch

    from cdit_runtime.phases import cache_config

    _, path, _ = _generation("PrefixStoreDiT", tmp_path)
    text = path.read_text()
    line = "slot = store.slot(i) if store is not None else None"
    assert line in text
    mutant = path.with_name("slot_zero.py")
    mutant.write_text(text.replace(line, line.replace("slot(i)", "slot(0)")))
    module = load_module("slot_zero", mutant)
    control = _cached(module, "PrefixStoreDiT", cache_config(OPTIONS, len(STEPS), 1e-12))
    baseline = _plain("PrefixStoreDiT")
    assert not torch.equal(control[-1], baseline[-1])


def test_calibration_computes_steps_whose_stream_changed_shape_when_it_forces() -> None:
    stats = [
        {
            "blocks": "blocks",
            "cachedSteps": [],
            "residualDiffs": {"2": 1.3, "3": 1.1, "4": 1.2},
            "forced": False,
            "shapeChangedSteps": [1],
        }
    ]
    doc = calibrate(stats, CacheOptions(max_warmup_steps=1), steps=5, share=0.5)
    assert doc["threshold"] == 1.0 and doc["computeSteps"] == [1]
    assert "step(s) 1 changed the stream's shape" in doc["reason"]
    # below 1.0 cache-dit checks shapes itself: nothing to compute
    stats[0]["residualDiffs"] = {"2": 0.3, "3": 0.1, "4": 0.2}
    assert "computeSteps" not in calibrate(stats, CacheOptions(max_warmup_steps=1), 5, 0.5)


def test_the_compute_mask_keeps_the_warmup() -> None:
    pytest.importorskip("cache_dit")
    from cdit_runtime.phases import cache_config

    options = CacheOptions(max_warmup_steps=2, warmup_interval=2)
    assert cache_config(options, 6, 1.0, compute_steps=[3]).steps_computation_mask == [
        1,
        1,
        0,
        1,
        0,
        0,
    ]
    assert cache_config(options, 6, 1.0).steps_computation_mask is None
