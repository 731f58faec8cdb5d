"""Analysis of real diffusers transformer sources, read from the installed package."""

from __future__ import annotations

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import diffusers_file

T = "models/transformers/"

# (file, class, {block list attr: ForwardPattern}, PatchFunctor needed, pipeline file or None)
CASES = [
    (
        T + "transformer_flux.py",
        "FluxTransformer2DModel",
        {"transformer_blocks": "Pattern_1", "single_transformer_blocks": "Pattern_1"},
        False,
        "pipelines/flux/pipeline_flux.py",
    ),
    (T + "transformer_wan.py", "WanTransformer3DModel", {"blocks": "Pattern_2"}, False, None),
    (
        T + "transformer_wan_vace.py",
        "WanVACETransformer3DModel",
        {"blocks": "Pattern_2"},
        True,
        None,
    ),
    (
        T + "dit_transformer_2d.py",
        "DiTTransformer2DModel",
        {"transformer_blocks": "Pattern_3"},
        True,
        None,
    ),
    (
        T + "transformer_z_image.py",
        "ZImageTransformer2DModel",
        {"layers": "Pattern_3"},
        False,
        "pipelines/z_image/pipeline_z_image.py",
    ),
    (
        T + "transformer_ltx2.py",
        "LTX2VideoTransformer3DModel",
        {"transformer_blocks": "Pattern_0"},
        True,
        None,
    ),
    (T + "hunyuan_transformer_2d.py", "HunyuanDiT2DModel", {"blocks": "Pattern_2"}, True, None),
    (
        T + "transformer_kandinsky.py",
        "Kandinsky5Transformer3DModel",
        {"visual_transformer_blocks": "Pattern_3"},
        False,
        None,
    ),
    (
        T + "transformer_hunyuan_video.py",
        "HunyuanVideoTransformer3DModel",
        {"transformer_blocks": "Pattern_0", "single_transformer_blocks": "Pattern_0"},
        False,
        None,
    ),
    (
        T + "transformer_sd3.py",
        "SD3Transformer2DModel",
        {"transformer_blocks": "Pattern_1"},
        False,
        "pipelines/stable_diffusion_3/pipeline_stable_diffusion_3.py",
    ),
    (
        T + "transformer_cosmos.py",
        "CosmosTransformer3DModel",
        {"transformer_blocks": "Pattern_2"},
        False,
        "pipelines/cosmos/pipeline_cosmos2_text2image.py",
    ),
    (
        T + "transformer_ernie_image.py",
        "ErnieImageTransformer2DModel",
        {"layers": "Pattern_3"},
        True,
        None,
    ),
]


@pytest.mark.parametrize(
    ("file", "cls", "lists", "needed", "pipeline"), CASES, ids=[c[1] for c in CASES]
)
def test_block_lists_patterns_and_patch_functor(file, cls, lists, needed, pipeline):
    result = analyze_path(
        diffusers_file(file), cls, diffusers_file(pipeline) if pipeline else None, registry=False
    )
    (t,) = result.transformers
    assert t.class_name == cls
    assert {b.attr: b.forward_pattern for b in t.block_lists} == lists
    assert t.patch_functor_needed is needed, [r.message for r in t.patch_reasons]
    for b in t.block_lists:
        assert b.evidence and all(e.line > 0 for e in b.evidence)


def test_flux_controlnet_residuals_are_conditional_on_the_input():
    flux = diffusers_file(T + "transformer_flux.py")
    alone = analyze_path(flux, "FluxTransformer2DModel", registry=False).transformers[0]
    reasons = [r for r in alone.patch_reasons if r.kind == "loop_index_dependent"]
    assert reasons and all(r.active_when and "controlnet" in r.active_when for r in reasons)
    assert alone.patch_functor_needed  # no pipeline: conservatively needed
    controlnet = diffusers_file("pipelines/flux/pipeline_flux_controlnet.py")
    with_cn = analyze_path(flux, "FluxTransformer2DModel", controlnet, registry=False)
    assert with_cn.transformers[0].patch_functor_needed


def test_refiner_and_side_branch_lists_are_not_cached():
    zimage = analyze_path(diffusers_file(T + "transformer_z_image.py"), registry=False)
    t = zimage.transformers[0]
    assert {o.attr for o in t.other_lists} >= {"noise_refiner", "context_refiner"}
    vace = analyze_path(
        diffusers_file(T + "transformer_wan_vace.py"), "WanVACETransformer3DModel", registry=False
    ).transformers[0]
    (other,) = vace.other_lists
    assert other.attr == "vace_blocks" and "does not update" in other.reason


def test_keyword_binding_mismatch_names_the_parameter():
    t = analyze_path(
        diffusers_file(T + "transformer_ltx2.py"), "LTX2VideoTransformer3DModel", registry=False
    ).transformers[0]
    binding = [r for r in t.patch_reasons if r.kind == "keyword_binding"]
    assert binding and "audio_hidden_states" in binding[0].message


def test_dit_post_loop_access_of_first_block():
    t = analyze_path(diffusers_file(T + "dit_transformer_2d.py"), registry=False).transformers[0]
    access = [r for r in t.patch_reasons if r.kind == "block_list_access"]
    assert access and "transformer_blocks[0]" in access[0].message


def test_json_contract_shape():
    doc = analyze_path(diffusers_file(T + "transformer_flux.py"), registry=False).to_json()
    assert doc["schemaVersion"] == 1
    assert len(doc["source"]["sha256"]) == 64
    t = doc["transformers"][0]
    assert t["isDiffusersModel"] is True
    for b in t["blockLists"]:
        assert set(b) >= {
            "attr",
            "blockClass",
            "forwardPattern",
            "signaturePattern",
            "confidence",
            "evidence",
        }
        assert 0.0 <= b["confidence"] <= 1.0
    assert set(t["patchFunctor"]) == {"needed", "reasons"}
    assert set(t["separateCfg"]) >= {"value", "evidence"}
    for d in t["diagnostics"]:
        assert d["severity"] in ("error", "warning", "info") and d["code"].startswith("CDIT")
