"""Per-block steps for loops the PatchFunctor could not move before:

- loops in a helper of `forward` (`forward` -> `self.forward_orig(...)`, as node-graph serving
  frameworks write DiTs, `third_party/switchyard_dit.py`): the functor copies the method that
  holds every line the analysis names and installs it under its own name;
- a block call in a branch of the body, beside a branch that hands the block to a replacement
  hook through a closure (`if ("double_block", i) in blocks_replace: def wrap(args): ...
  block(...)` / `else: img, txt = block(...)`), or behind a per-index skip (diffusers'
  SD3Transformer2DModel: `if not is_skip: ... = block(...)`): the call is found in the branch,
  a closure's own locals are not values carried between blocks, and a name the next loop binds
  before it reads it is not one forward reads after this loop.

Before, caching was refused for both (the functor found no loop in `forward`, or not one
`... = block(...)` statement). Now each generated module reproduces the model with caching
disabled, bit for bit, with the replacement hooks, ControlNet residuals and skipped layers the
loops apply per index, and forced caching engages.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES

SWITCHYARD = FIXTURES / "models" / "third_party" / "switchyard_dit.py"


def _switchyard_extra(kind: str) -> Any:
    import torch

    from tests.module_loading import load_module

    fixture = load_module("switchyard_inputs", SWITCHYARD)
    _, _, context, pooled = fixture.example_inputs(None, torch.Generator().manual_seed(1))
    if kind == "plain":
        return lambda: (context, pooled)
    g = torch.Generator().manual_seed(7)
    control = {
        "input": [torch.randn(1, 4, 32, generator=g), None],
        "output": [None, torch.randn(1, 4, 32, generator=g)],
    }

    def halve(args: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
        out = extra["original_block"](args)
        return {name: value * 0.5 for name, value in out.items()}

    options = {"patches_replace": {"dit": {("double_block", 1): halve, ("single_block", 0): halve}}}
    return lambda: (context, pooled, control, options)


@pytest.mark.parametrize("kind", ["plain", "hooks and control"])
def test_loops_in_a_helper_of_forward_run_through_steps(kind: str, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    from tests.transformer_cache_runs import assert_caches_exactly, cached_module, seeded_model

    module = cached_module(SWITCHYARD, "SwitchyardDiT", tmp_path)
    path = tmp_path / "switchyarddit_integration.py"
    assert "transformer.forward_orig = _patched_forward.__get__(transformer)" in path.read_text()
    latent = torch.randn(1, 4, 4, 4, generator=torch.Generator().manual_seed(2))
    baseline = assert_caches_exactly(
        module,
        lambda: seeded_model(SWITCHYARD, "SwitchyardDiT", "switchyard_dit"),
        lambda: latent.clone(),
        _switchyard_extra(kind),
    )
    if kind != "plain":  # the hooks and residuals changed the output: they ran
        plain = seeded_model(SWITCHYARD, "SwitchyardDiT", "switchyard_dit")
        with torch.no_grad():
            unhooked = plain(latent.clone(), torch.tensor([0.1]), *_switchyard_extra("plain")())
        assert (unhooked - baseline[-1]).abs().max().item() > 1e-3


def _sd3_source() -> Path:
    spec = importlib.util.find_spec("diffusers")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("diffusers is not installed")
    root = Path(next(iter(spec.submodule_search_locations)))
    return root / "models" / "transformers" / "transformer_sd3.py"


def _sd3() -> Any:
    import torch
    from diffusers import SD3Transformer2DModel

    torch.manual_seed(0)
    model = SD3Transformer2DModel(
        sample_size=8,
        patch_size=2,
        in_channels=4,
        num_layers=4,
        attention_head_dim=8,
        num_attention_heads=4,
        caption_projection_dim=32,
        joint_attention_dim=16,
        pooled_projection_dim=16,
        out_channels=4,
    ).eval()
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.1)
    return model


@pytest.mark.parametrize("per_index", ["none", "skip_layers", "block_controlnet_hidden_states"])
def test_sd3_block_call_behind_a_per_index_skip_runs_through_steps(
    per_index: str, tmp_path: Path
) -> None:
    torch = pytest.importorskip("torch")
    cache_dit = pytest.importorskip("cache_dit")
    from tests.module_loading import load_module
    from tests.transformer_cache_runs import dbcache_config, generate_standalone

    result = generate_standalone(_sd3_source(), "SD3Transformer2DModel", tmp_path)
    assert "cache" not in [r["part"] for r in result["refused"]]
    module = load_module(
        f"sd3_integration_{per_index}", tmp_path / "sd3transformer2dmodel_integration.py"
    )
    g = torch.Generator().manual_seed(1)
    latent, text, pooled = (
        torch.randn(1, 4, 8, 8, generator=g),
        torch.randn(1, 5, 16, generator=g),
        torch.randn(1, 16, generator=g),
    )
    extra = {
        "none": {},
        "skip_layers": {"skip_layers": [1]},
        "block_controlnet_hidden_states": {
            "block_controlnet_hidden_states": [
                torch.randn(1, 16, 32, generator=g) for _ in range(2)
            ]
        },
    }[per_index]

    def run(model: Any) -> list[Any]:
        with torch.no_grad():
            return [
                model(
                    hidden_states=latent,
                    encoder_hidden_states=text,
                    pooled_projections=pooled,
                    timestep=torch.tensor([t * 1000]),
                    return_dict=False,
                    **extra,
                )[0]
                for t in (0.9, 0.6, 0.3, 0.1)
            ]

    baseline = run(_sd3())
    outputs = {}
    for threshold in (1e-12, 1.0):
        model = _sd3()
        module.enable(None, transformer=model, cache_config=dbcache_config(threshold))
        outputs[threshold] = run(model)
        cache_dit.disable_cache(model)
    assert all(torch.equal(c, b) for c, b in zip(outputs[1e-12], baseline, strict=True))
    assert (outputs[1.0][-1] - baseline[-1]).abs().max().item() > 1e-3
