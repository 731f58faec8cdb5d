"""Research code of the Wan family (and diffusers' WanAnimate 2) hands forward its latents as a
Python list of `(C, F, H, W)` tensors, embeds each in a comprehension, stacks their grid sizes and
pads them to a caller-given length; its blocks get their arguments from a dict (`block(x, **kw)`),
and its attention and blocks do their work in closures. `third_party/reel_video.py` has that shape.

Before: the context-parallel plan root-split the list and the integer `seq_len` as "token
sequences" (cache-dit stopped at the first call: `Unsupported input type: <class 'int'>`), and
did not see that the blocks lay their rotary angles out from the whole latent's grid sizes, built
in a comprehension; the tensor-parallel reading did not enter the closures and found nothing to
shard. Now CP is refused upfront with both reasons, TP shards the projections read inside the
closures (exact on 2 gloo ranks; the same planner without its head division fails), and caching
reproduces the model.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES

SOURCE = FIXTURES / "models" / "third_party" / "reel_video.py"
CLS = "ReelVideoModel"
HEAD_DIVISION = 'shard_div_attr(block.attn, "heads", tp_size)'


def _transformer(path: Path, cls: str | None = None) -> dict[str, Any]:
    return analyze_path(path, cls, registry=False).to_json()["transformers"][0]


def _diffusers_file(name: str) -> Path:
    spec = importlib.util.find_spec("diffusers")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("diffusers is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "models" / "transformers" / name


def test_a_list_of_latents_is_not_root_split_and_whole_grid_sizes_refuse_cp() -> None:
    cp = _transformer(SOURCE)["contextParallel"]
    assert cp["approach"] == "none"
    assert cp["plan"] == {}
    said = " ".join(e["message"] for e in cp["evidence"])
    assert "walks `x` element by element" in said
    assert "a tensor of the whole `x`'s grid sizes" in said
    assert any(w["code"] == "CDIT220" and "`sizes`" in w["message"] for w in cp["warnings"])


def test_diffusers_wan_animate_2_list_input_is_not_root_split() -> None:
    path = _diffusers_file("transformer_wan_animate_2.py")
    cp = _transformer(path, "WanAnimate2Transformer3DModel")["contextParallel"]
    assert "" not in cp["plan"]  # it split `hidden_states`, a list, at the root before
    assert cp["approach"] == "none"
    said = " ".join(e["message"] for e in cp["evidence"])
    assert "walks `hidden_states` element by element" in said


def test_tensor_parallel_reads_projections_inside_closures() -> None:
    tp = _transformer(SOURCE)["tensorParallel"]
    assert tp["layers"] == {
        "blocks.*.attn.to_q": "colwise",
        "blocks.*.attn.to_k": "colwise",
        "blocks.*.attn.to_v": "colwise",
        "blocks.*.attn.to_out": "rowwise",
        "blocks.*.cross.to_q": "colwise",
        "blocks.*.cross.to_k": "colwise",
        "blocks.*.cross.to_v": "colwise",
        "blocks.*.cross.to_out": "rowwise",
        "blocks.*.ff.0": "colwise",
        "blocks.*.ff.2": "rowwise",
    }
    assert sorted(tp["shardDivAttrs"]) == ["blocks.*.attn.heads", "blocks.*.cross.heads"]


def test_closure_head_sizes_are_read_in_a_diffusers_processor() -> None:
    """StableAudio 3's cross-attention processor splits heads in a closure
    (`x.unflatten(-1, (attn.heads, attn.dim_heads))`): the head count is `heads`."""
    path = _diffusers_file("transformer_stable_audio3.py")
    attention = _transformer(path, "StableAudio3DiTModel")["tensorParallel"]["attention"]
    cross = next(a for a in attention if a["module"].endswith("cross_attn"))
    assert (cross["headsAttr"], cross["heads"]) == ("heads", 24)


def test_the_tp_plan_matches_one_process_on_two_gloo_ranks(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    from tests.tp_planner_runs import assert_exact_and_control_fails, planned_and_control

    assert_exact_and_control_fails(
        *planned_and_control(SOURCE, CLS, tmp_path, HEAD_DIVISION, "pass")
    )


def test_caching_reproduces_the_model(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    from tests.transformer_cache_runs import assert_caches_exactly, cached_module, seeded_model

    generator = torch.Generator().manual_seed(3)
    latent = torch.randn(4, 2, 4, 4, generator=generator)
    text = [torch.randn(5, 16, generator=generator)]
    assert_caches_exactly(
        cached_module(SOURCE, CLS, tmp_path),
        lambda: seeded_model(SOURCE, CLS, "reel_video"),
        lambda: [latent.clone()],
        lambda: (text, 10),
        sample=lambda output: output[0],
    )
