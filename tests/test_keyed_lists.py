"""Block lists held in an `nn.ModuleDict` and run by key (`for blk in self.towers["coarse"]`,
FLUX.3's `self.mode_blocks["image"]`): each is a cached list of its own (module path
`towers.coarse`). They were ignored before (FLUX.3's image blocks ran uncached beside its cached
text and joint blocks; a model with only keyed lists had "no transformer found").

The generated module registers each keyed list under an attribute of its own, hidden from the
state dict and from the keys a load expects, and wraps forward to put cache-dit's cached list in
the ModuleDict for the call. Proven here on CPU: the no-cache control reproduces the baseline
bit for bit, forced caching skips the keyed list's middle block, the state dict and a strict
load are unchanged, and without the routing the keyed list runs every block (the control). 2
gloo ranks (Ulysses, Ring, TP through the aliased hook-plan keys): tests/test_cp_plans_gloo.py,
`mode_dict`, `wide_mode_dict`.

Lists nested in an `nn.ModuleList` (`for stage in self.stages: for blk in stage:`,
stage_lists_dit.py) go the same way, one cached list per stage (`stages.0`, ...): the wrapper
swaps `self.stages[i]`; `stage_lists` on 2 gloo ranks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES, diffusers_file
from tests.transformer_cache_runs import (
    STEPS,
    count_calls,
    dbcache_config,
    generate_standalone,
    seeded_model,
    without,
)

torch = pytest.importorskip("torch")
cache_dit = pytest.importorskip("cache_dit")

MODE_DICT = FIXTURES / "models" / "third_party" / "mode_dict_dit.py"


def _lists(path: Path, cls: str) -> list[dict[str, Any]]:
    (t,) = analyze_path(path, cls, registry=False).to_json()["transformers"]
    return t["blockLists"]


def test_lists_held_in_a_module_dict_are_cached_lists_by_key() -> None:
    lists = _lists(MODE_DICT, "ModeDictDiT")
    assert [(b["attr"], b["blockCount"]) for b in lists] == [
        ("towers.coarse", 3),
        ("towers.fine", 2),
        ("joint", 3),
    ]
    assert (
        '`self.towers["coarse"]` is an nn.ModuleList of TowerBlock'
        in (lists[0]["evidence"][0]["message"])
    )
    # keys made by a comprehension: the list forward runs, with the template's count
    assert [(b["attr"], b["blockCount"]) for b in _lists(MODE_DICT, "WideModeDictDiT")] == [
        ("wide.high", 3)
    ]


def test_flux3s_image_mode_blocks_are_cached() -> None:
    lists = _lists(
        diffusers_file("models/transformers/transformer_flux3.py"), "Flux3Transformer2DModel"
    )
    assert [b["attr"] for b in lists] == [
        "txt_mode_blocks",
        "mode_blocks.image",
        "single_transformer_blocks",
    ]


def _model(cls: str) -> Any:
    from tests.module_loading import load_module

    model = seeded_model(MODE_DICT, cls, "mode_dict_dit")
    inputs = load_module("mode_dict_dit", MODE_DICT).example_inputs
    return model, inputs(model, torch.Generator().manual_seed(1))


def _runs(module: Any, threshold: float | None) -> tuple[list[Any], int, Any]:
    """Outputs of `STEPS` calls, the calls of `towers["coarse"][1]`, and the model."""
    model, (tokens, context, _) = _model("ModeDictDiT")
    calls = count_calls(model.towers["coarse"][1])
    if threshold is not None:
        module.enable(None, transformer=model, cache_config=dbcache_config(threshold))
    with torch.no_grad():
        outputs = [model(tokens, context, torch.tensor([t])) for t in STEPS]
    return outputs, calls[0], model


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("keyed")
    generate_standalone(MODE_DICT, "ModeDictDiT", out)
    return out / "modedictdit_integration.py"


def test_the_generated_module_caches_a_keyed_list(generated: Path) -> None:
    from tests.module_loading import load_module

    module = load_module("modedictdit_integration", generated)
    text = generated.read_text()
    assert '"_cdit_towers_coarse.0"' in text  # the hook plan goes through the alias
    baseline, plain_calls, plain = _runs(module, None)
    assert plain_calls == len(STEPS)
    control, control_calls, _ = _runs(module, 1e-12)
    assert all(torch.equal(c, b) for c, b in zip(control, baseline, strict=True))
    assert control_calls == len(STEPS)
    forced, forced_calls, model = _runs(module, 1.0)
    assert forced_calls < len(STEPS)  # the keyed list's middle block skipped on cached steps
    assert (forced[-1] - baseline[-1]).abs().max().item() > 1e-3
    # the ModuleDict holds the list again, and the state dict is the model's own (cache-dit
    # re-registers each list it patched, so their keys come last: compared as a set)
    assert type(model.towers["coarse"]) is torch.nn.ModuleList
    assert set(model.state_dict()) == set(plain.state_dict())
    missing, unexpected = model.load_state_dict(plain.state_dict(), strict=True)
    assert not missing and not unexpected
    cache_dit.disable_cache(model)


def test_without_the_routing_the_keyed_list_is_not_cached(generated: Path) -> None:
    """The control: the same module with forward not wrapped runs every block of the keyed
    list (cache-dit's cached list is set on the alias, which forward never reads)."""
    module = without(generated, "transformer.forward = _routed", "keyed_unrouted")
    _, calls, _ = _runs(module, 1.0)
    assert calls == len(STEPS)


def test_flux3s_generated_module_caches_its_image_mode_blocks(tmp_path: Path) -> None:
    """The real class: a tiny random-weight FLUX.3 through its generated standalone module. The
    no-cache control matches the plain run (to float rounding: cache-dit's wrapper of the text
    mode blocks adds it, as before keyed lists were cached), and forced caching skips the
    middle image-mode block on cached steps."""
    from diffusers import Flux3Transformer2DModel

    from tests.module_loading import load_module

    source = diffusers_file("models/transformers/transformer_flux3.py")
    generate_standalone(source, "Flux3Transformer2DModel", tmp_path)
    module = load_module("flux3_keyed", tmp_path / "flux3transformer2dmodel_integration.py")
    g = torch.Generator().manual_seed(1)
    x, ctx = torch.randn(1, 16, 8, generator=g), torch.randn(1, 5, 12, generator=g)
    grid = torch.meshgrid(
        torch.zeros(1), torch.arange(4.0), torch.arange(4.0), torch.zeros(1), indexing="ij"
    )
    img_ids = torch.stack(grid, -1).reshape(-1, 4)
    txt_ids = torch.zeros(5, 4)
    txt_ids[:, 3] = torch.arange(5.0)

    def run(threshold: float | None) -> tuple[list[Any], int]:
        torch.manual_seed(0)
        model = Flux3Transformer2DModel(
            in_channels=8,
            cond_in_channels=8,
            num_layers=3,
            num_single_layers=2,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=12,
            timestep_channels=16,
            axes_dims_rope=(4, 4, 4, 4),
        ).eval()
        calls = count_calls(model.mode_blocks["image"][1])
        if threshold is not None:
            module.enable(None, transformer=model, cache_config=dbcache_config(threshold))
        with torch.no_grad():
            out = [
                model(x, ctx, torch.tensor([t]), img_ids, txt_ids, return_dict=False)[0]
                for t in STEPS
            ]
        return out, calls[0]

    baseline, _ = run(None)
    control, control_calls = run(1e-12)
    assert control_calls == len(STEPS)
    assert all(torch.allclose(c, b, atol=1e-4) for c, b in zip(control, baseline, strict=True))
    _, forced_calls = run(1.0)
    assert forced_calls < len(STEPS)


STAGES = FIXTURES / "models" / "third_party" / "stage_lists_dit.py"


def test_lists_nested_in_a_module_list_are_cached_lists_per_stage() -> None:
    """`for stage in self.stages: for blk in stage:` (stage_lists_dit.py): one cached list per
    stage, their count from the constructor's default (was "no transformer found")."""
    lists = _lists(STAGES, "StageListsDiT")
    assert [(b["attr"], b["blockCount"]) for b in lists] == [
        ("stages.0", 3),
        ("stages.1", 3),
        ("stages.2", 3),
    ]
    assert (
        "`self.stages[1]` is an nn.ModuleList of StageBlock" in lists[1]["evidence"][0]["message"]
    )
    (t,) = analyze_path(STAGES, "MergingStagesDiT", registry=False).to_json()["transformers"]
    assert [b["attr"] for b in t["blockLists"]] == ["stages.0", "stages.1", "stages.2"]
    assert not t["patchFunctor"]["reasons"]  # the merge between stages runs outside the lists
    (why,) = [w for w in t["contextParallel"]["warnings"] if w["code"] == "CDIT220"]
    assert "regroups a split token stream between the blocks" in why["message"]


@pytest.mark.parametrize("cls", ["StageListsDiT", "MergingStagesDiT"])
def test_the_generated_module_caches_each_stage(tmp_path: Path, cls: str) -> None:
    """Control bit-exact; forced caching skips the middle block of every stage (the merging
    stages change the token count between stages, each stage keeps it); the state dict is
    the model's own."""
    from tests.module_loading import load_module

    generate_standalone(STAGES, cls, tmp_path)
    module = load_module(f"stages_{cls}", tmp_path / f"{cls.lower()}_integration.py")
    tokens = torch.randn(1, 16, 6, generator=torch.Generator().manual_seed(1))

    def run(threshold: float | None) -> tuple[list[Any], list[int], Any]:
        model = seeded_model(STAGES, cls, "stage_lists_dit")
        calls = [count_calls(stage[1]) for stage in model.stages]
        if threshold is not None:
            module.enable(None, transformer=model, cache_config=dbcache_config(threshold))
        with torch.no_grad():
            out = [model(tokens, torch.tensor([t])) for t in STEPS]
        return out, [c[0] for c in calls], model

    baseline, plain_calls, plain = run(None)
    control, control_calls, _ = run(1e-12)
    assert all(torch.equal(c, b) for c, b in zip(control, baseline, strict=True))
    assert control_calls == plain_calls == [len(STEPS)] * 3
    forced, forced_calls, model = run(1.0)
    assert all(n < len(STEPS) for n in forced_calls)
    assert (forced[-1] - baseline[-1]).abs().max().item() > 1e-3
    assert set(model.state_dict()) == set(plain.state_dict())
    assert all(type(stage) is torch.nn.ModuleList for stage in model.stages)
    cache_dit.disable_cache(model)
