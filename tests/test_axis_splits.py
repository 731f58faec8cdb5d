"""Context parallelism for factorised video transformers: an input axis (the frames) that the
spatial blocks hold in the batch and the temporal blocks attend over is split at the root.

`third_party/tubelet_video.py` (frames-first latent, einops regroups around each temporal
block, a per-frame table added before it under a `f >= 2` guard) and diffusers' Latte (frames
merged into the batch by `permute` + `reshape`, regrouped by `reshape` + `permute`, its
`temp_pos_embed` added under `num_frame > 1`) were refused (CDIT220: the loop regroups the
stream between blocks). Now the frame axis is split: the temporal attention is routed, the
spatial attention stays local, the per-frame table is sliced per rank, the output gathered on
the frame axis. A frame count read by anything but a reshape, a repeat or a comparison (rotary
angles computed from it, a longer table cut to it) refuses. Blocks that regroup their own
tokens (Open-Sora's STDiT, `third_party/st_dit.py`; an invented axial block,
`third_party/cube_video.py`) are read per attention module: `<list>.*.<attr>` regions.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES

SOURCE = FIXTURES / "models" / "third_party" / "tubelet_video.py"
ST_DIT = FIXTURES / "models" / "third_party" / "st_dit.py"
CUBE = FIXTURES / "models" / "third_party" / "cube_video.py"
PROCESSORS = FIXTURES / "models" / "third_party" / "processor_video.py"
REGION = '_SDPA_REGION = ("temporal",)'


def _cp(path: Path | str, cls: str) -> dict:
    return analyze_path(path, cls, registry=False).to_json()["transformers"][0]["contextParallel"]


def test_the_frame_axis_is_split_where_spatial_blocks_batch_it_and_temporal_ones_attend() -> None:
    late = _cp(SOURCE, "TubeletLateDiT")["factorised"]  # two loops, the regroup between them
    assert (late["routed"], late["local"], late["tables"]) == (
        ["temporal"],
        ["spatial"],
        [["frame_pos", -2]],
    )
    cp = _cp(SOURCE, "TubeletVideoDiT")
    assert cp["approach"] == "root_split"
    assert cp["plan"] == {
        "": {
            "x": {
                "split_dim": 1,
                "expected_dims": 5,
                "split_output": False,
                "reason": "split `x` on its axis 1 at the root",
                "line": 0,
            }
        }
    }
    split = cp["factorised"]
    assert (split["axis"], split["gatherAxis"]) == (1, 1)
    assert (split["routed"], split["local"]) == (["temporal"], ["spatial"])
    assert split["tables"] == [["frame_pos", -2]]
    assert split["guards"] == [[">=", 2]]


@pytest.mark.parametrize(
    ("cls", "read"),
    [
        ("TubeletFrameRopeDiT", "`angles = self.frame_angles(f, x.shape[-1])`"),
        ("TubeletWindowDiT", "`x = temporal(x + self.frame_pos[:, :f], t_temporal)`"),
    ],
)
def test_a_frame_count_read_by_a_table_or_module_refuses(cls: str, read: str) -> None:
    cp = _cp(SOURCE, cls)
    assert cp["approach"] == "none"
    assert any(
        w["code"] == "CDIT220"
        and w["message"].startswith(read)
        and "this rank's share" in w["message"]
        for w in cp["warnings"]
    )


@pytest.mark.parametrize(
    ("cls", "read"),
    [
        # the levels averaged over the frames by this rank's count
        ("TubeletForcingDiT", "`t.view(b, f, -1)` lays out `t`, computed from forward's input"),
        # the first frame's level read for the temporal blocks
        ("TubeletLevelsDiT", "`t_temporal = self.time_proj(timestep[:, :1].float() / 1000)"),
    ],
)
def test_a_per_frame_input_read_across_its_frames_refuses(cls: str, read: str) -> None:
    """Diffusion forcing: `timestep (B, F)` folded into the spatial blocks' `(B F)` rows would
    be split with the latent, but these models also read it across its frames."""
    cp = _cp(SOURCE, cls)
    assert cp["approach"] == "none" and "factorised" not in cp
    assert any(w["code"] == "CDIT220" and w["message"].startswith(read) for w in cp["warnings"])


def test_a_per_frame_input_converted_before_its_fold_is_still_a_companion(tmp_path: Path) -> None:
    """`timestep = timestep.to(x.dtype)` before the fold keeps its layout; a read of its
    values (`timestep.mean()`) or arithmetic with the frame count does not."""
    text = SOURCE.read_text()
    fold = '        t = self.time_proj(rearrange(timestep, "b f -> (b f) 1").float() / 1000)\n'
    assert text.count(fold) == 3  # the three diffusion-forcing variants
    for extra, inputs in [
        ("        timestep = timestep.to(x.dtype)\n", [["timestep", 1]]),
        ("        timestep = timestep - timestep.mean()\n", None),
        # arithmetic with this rank's frame count leaves every frame's rows
        ("        timestep = timestep * f\n", None),
    ]:
        path = tmp_path / "tubelet_video.py"
        path.write_text(text.replace(fold, extra + fold))
        split = _cp(path, "TubeletFramewiseDiT").get("factorised")
        assert (split or {}).get("inputs") == inputs, extra


def test_a_per_frame_input_folded_into_the_rows_is_split_with_the_latent(tmp_path: Path) -> None:
    """`rearrange(timestep, "b f -> (b f) 1")` feeding the spatial blocks: `timestep` is split
    on its axis 1 with the latent's frames. On 2 gloo ranks it matches one process (Ulysses and
    Ring); control: the same module without the companion split stops on the rows."""
    pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    from tests.cp_runs import WORKER, offsets, routed_cases
    from tests.gloo_launch import run_two_ranks

    split = _cp(SOURCE, "TubeletFramewiseDiT")["factorised"]
    assert split["inputs"] == [["timestep", 1]]
    cases = routed_cases(SOURCE, ["TubeletFramewiseDiT"], tmp_path)
    cases["ring"] = {**cases["TubeletFramewiseDiT"], "ring": True}
    found = offsets(cases, tmp_path)
    assert found["TubeletFramewiseDiT"] < 1e-5 and found["ring"] < 1e-5, found
    module = Path(cases["TubeletFramewiseDiT"]["module"])
    line = '"inputs": (("timestep", 1),),'
    assert line in module.read_text()
    control = tmp_path / "whole_timestep.py"
    control.write_text(module.read_text().replace(line, '"inputs": (),'))
    (tmp_path / "control").mkdir()
    got = run_two_ranks(
        WORKER,
        {"whole": {**cases["TubeletFramewiseDiT"], "module": str(control)}},
        tmp_path / "control",
    )["whole"]
    assert isinstance(got, str) and "must match the size of tensor" in got, got


def test_latte_splits_its_frames() -> None:
    diffusers = pytest.importorskip("diffusers")
    path = Path(diffusers.__file__).parent / "models" / "transformers" / "latte_transformer_3d.py"
    cp = _cp(path, "LatteTransformer3DModel")
    split = cp["factorised"]
    assert cp["approach"] == "root_split"
    assert (split["param"], split["axis"], split["gatherAxis"]) == ("hidden_states", 2, 2)
    assert (split["routed"], split["local"]) == (
        ["temporal_transformer_blocks"],
        ["transformer_blocks"],
    )
    assert split["tables"] == [["temp_pos_embed", -2]]
    assert split["guards"] == [[">", 1]]


def test_blocks_regrouping_their_own_tokens_are_read_per_attention() -> None:
    """STDiT (einops inside the block) and an invented axial block (`view` / `transpose` /
    `reshape`, the tokens per frame measured inside the block as `n // num_frames`, the frame
    count passed by keyword): the spatial attention holds the frames in its batch, the temporal
    one attends over them; both are in one block list, so the region is per module."""
    cp = _cp(ST_DIT, "STDiT")
    split = cp["factorised"]
    assert (cp["approach"], split["axis"]) == ("root_split", 2)
    assert (split["routed"], split["local"]) == (["blocks.*.attn_temp"], ["blocks.*.attn"])
    cp = _cp(CUBE, "CubeVideoDiT")
    split = cp["factorised"]
    assert (split["param"], split["axis"], split["gatherAxis"]) == ("latents", 2, 2)
    assert (split["routed"], split["local"]) == (["blocks.*.attn_t"], ["blocks.*.attn_s"])


@pytest.mark.parametrize(
    ("cls", "read"),
    [
        # a temporal convolution inside the block: its window would be cut
        ("CubeShiftDiT", "ShiftBlock regroups the tokens it sees"),
        # frames merged by the patch embedding: no axis reaches the blocks as it came
        ("CubeStrideDiT", "AxialBlock regroups the tokens it sees"),
    ],
)
def test_work_across_frames_refuses(cls: str, read: str) -> None:
    cp = _cp(CUBE, cls)
    assert cp["approach"] == "none" and "factorised" not in cp
    assert any(w["code"] == "CDIT220" and w["message"].startswith(read) for w in cp["warnings"])


def test_the_frame_split_matches_one_process_on_two_gloo_ranks(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    from tests.cp_runs import offsets, routed_cases

    cases: dict[str, dict] = {}
    for source, cls, region, everywhere in [
        (SOURCE, "TubeletVideoDiT", REGION, "_SDPA_REGION = ()"),
        (SOURCE, "TubeletLateDiT", REGION, "_SDPA_REGION = ()"),
        (ST_DIT, "STDiT", '_SDPA_REGION = ("blocks.*.attn_temp",)', '_SDPA_REGION = ("blocks",)'),
        (CUBE, "CubeVideoDiT", '_SDPA_REGION = ("blocks.*.attn_t",)', '_SDPA_REGION = ("blocks",)'),
        (PROCESSORS, "ProcessorVideoDiT", TEMP_REGION, '_SDPA_REGION = ("blocks",)'),
    ]:
        cases.update(routed_cases(source, [cls], tmp_path, unrouted=[cls]))
        text = Path(cases[cls]["module"]).read_text()
        assert region in text, cls
        control = tmp_path / f"everywhere_{cls}.py"
        control.write_text(text.replace(region, everywhere))
        cases[f"{cls} ring"] = {**cases[cls], "ring": True}
        cases[f"{cls} routed everywhere"] = {**cases[cls], "module": str(control)}
    cases.update(_dispatch_cases(tmp_path))
    found = offsets(cases, tmp_path)
    for cls in ("TubeletVideoDiT", "TubeletLateDiT", "STDiT", "CubeVideoDiT", "ProcessorVideoDiT"):
        assert found[cls] < 1e-5 and found[f"{cls} ring"] < 1e-5, found
        # the temporal attention left on this rank's frames, or the spatial attention run
        # across ranks (over two frames' patches): both differ
        assert found[f"unrouted {cls}"] > 1e-3, found
        assert found[f"{cls} routed everywhere"] > 1e-3, found
    assert found["DispatchVideoDiT"] < 1e-5 and found["DispatchVideoDiT ring"] < 1e-5, found
    assert found["DispatchVideoDiT routed everywhere"] > 1e-3, found


def test_uneven_frame_shares_run_under_ulysses_anything(tmp_path: Path) -> None:
    """5 frames on 2 ranks: 3 + 2 under Ulysses Anything Attention (the per-frame table sliced
    to each rank's rows, the output gathered from uneven shares), matching one process; plain
    Ulysses and Ring stop at the call with the reason; the temporal attention unrouted differs."""
    pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    from tests.cp_runs import WORKER, offsets, routed_cases
    from tests.gloo_launch import run_two_ranks

    cp = _cp(SOURCE, "TubeletClipDiT")
    assert cp["approach"] == "root_split" and cp["uaaRecommended"] is True
    cases = routed_cases(SOURCE, ["TubeletClipDiT"], tmp_path, unrouted=["TubeletClipDiT"])
    uaa = {
        "uaa": {**cases["TubeletClipDiT"], "uaa": True},
        "unrouted uaa": {**cases["unrouted TubeletClipDiT"], "uaa": True},
    }
    found = offsets(uaa, tmp_path)
    assert found["uaa"] < 1e-5 and found["unrouted uaa"] > 1e-3, found
    plain = {"ulysses": cases["TubeletClipDiT"], "ring": {**cases["TubeletClipDiT"], "ring": True}}
    (tmp_path / "plain").mkdir()
    got = run_two_ranks(WORKER, plain, tmp_path / "plain")
    for name in plain:
        assert isinstance(got[name], str), name
        assert "(5): the size must divide by the 2 ranks (or run Ulysses Anything" in got[name]


SDPA = "        y = F.scaled_dot_product_attention(q, k, v)\n"
ROTATED = """        angle = torch.arange(q.shape[2], dtype=q.dtype)[:, None] * 0.1
        q = q * angle.cos() + q.roll(1, dims=-1) * angle.sin()
        k = k * angle.cos() + k.roll(1, dims=-1) * angle.sin()
"""


@pytest.mark.parametrize(
    ("source", "cls", "edit", "why"),
    [
        (SOURCE, "TubeletVideoDiT", ("(q, k, v)", "(q, k, v, is_causal=True)"), "attends causally"),
        (CUBE, "CubeVideoDiT", ("(q, k, v)", "(q, k, v, is_causal=True)"), "attends causally"),
        (SOURCE, "TubeletVideoDiT", (SDPA, ROTATED + SDPA), "counts positions from the tokens"),
        (CUBE, "CubeVideoDiT", (SDPA, ROTATED + SDPA), "counts positions from the tokens"),
    ],
)
def test_routed_attention_is_read_as_a_token_split_reads_it(
    tmp_path: Path, source: Path, cls: str, edit: tuple[str, str], why: str
) -> None:
    """The attention a frame split routes sees this rank's frames as a token split's attention
    sees its tokens: causal attention (cache-dit's CP attention stops on it) and positions it
    counts from its own length (every rank from 0) refuse, for a routed list (Tubelet) and for a
    routed module inside the blocks (Cube)."""
    text = source.read_text()
    assert edit[0] in text
    path = tmp_path / source.name
    path.write_text(text.replace(edit[0], edit[1]))
    cp = _cp(path, cls)
    assert cp["approach"] == "none"
    assert any(w["code"] == "CDIT220" and why in w["message"] for w in cp["warnings"])


TEMP_REGION = '_SDPA_REGION = ("blocks.*.attn_temp",)'
LOCAL_LISTS = '_SPLIT_LISTS = ("blocks.*.attn_temp",)'


def _dispatch_cases(out: Path) -> dict[str, dict]:
    """diffusers' `WanAttention` (its processor dispatches with the parallel config cache-dit
    hands it: nothing to route, the spatial attention's config is cleared) and, as the control,
    the same module with every attention of the blocks left to run across ranks."""
    from tests.transformer_cache_runs import generate_standalone

    generate_standalone(PROCESSORS, "DispatchVideoDiT", out)
    module = out / "dispatchvideodit_integration.py"
    text = module.read_text()
    assert LOCAL_LISTS in text and "_route_sdpa(model)" not in text
    control = out / "dispatch_everywhere.py"
    control.write_text(text.replace(LOCAL_LISTS, '_SPLIT_LISTS = ("blocks",)'))
    case = {"fixture": str(PROCESSORS), "cls": "DispatchVideoDiT", "module": str(module)}
    return {
        "DispatchVideoDiT": case,
        "DispatchVideoDiT ring": {**case, "ring": True},
        "DispatchVideoDiT routed everywhere": {**case, "module": str(control)},
    }


def test_dispatching_processors_keep_the_spatial_attention_local(tmp_path: Path) -> None:
    """Checked with the other gloo cases: here the analysis side."""
    for cls, routes in (("ProcessorVideoDiT", ["AttnProcessor2_0"]), ("DispatchVideoDiT", [])):
        cp = _cp(PROCESSORS, cls)
        assert cp["factorised"]["routed"] == ["blocks.*.attn_temp"], cls
        assert [r["class"] for r in cp["sdpaRoutes"]] == routes, cls
