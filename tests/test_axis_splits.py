"""Context parallelism for factorised video transformers: an input axis (the frames) that the
spatial blocks hold in the batch and the temporal blocks attend over is split at the root.

`third_party/tubelet_video.py` (frames-first latent, einops regroups around each temporal
block, a per-frame table added before it under a `f >= 2` guard) and diffusers' Latte (frames
merged into the batch by `permute` + `reshape`, regrouped by `reshape` + `permute`, its
`temp_pos_embed` added under `num_frame > 1`) were refused (CDIT220: the loop regroups the
stream between blocks). Now the frame axis is split: the temporal attention is routed, the
spatial attention stays local, the per-frame table is sliced per rank, the output gathered on
the frame axis. A frame count read by anything but a reshape, a repeat or a comparison (rotary
angles computed from it, a longer table cut to it) refuses.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES

SOURCE = FIXTURES / "models" / "third_party" / "tubelet_video.py"
REGION = '_SDPA_REGION = ("temporal",)'


def _cp(path: Path | str, cls: str) -> dict:
    return analyze_path(path, cls, registry=False).to_json()["transformers"][0]["contextParallel"]


def test_the_frame_axis_is_split_where_spatial_blocks_batch_it_and_temporal_ones_attend() -> None:
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


def test_the_frame_split_matches_one_process_on_two_gloo_ranks(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    from tests.cp_runs import offsets, routed_cases

    cases = routed_cases(SOURCE, ["TubeletVideoDiT"], tmp_path, unrouted=["TubeletVideoDiT"])
    module = Path(cases["TubeletVideoDiT"]["module"])
    text = module.read_text()
    assert REGION in text
    everywhere = tmp_path / "routed_everywhere.py"
    everywhere.write_text(text.replace(REGION, "_SDPA_REGION = ()"))
    cases["ring"] = {**cases["TubeletVideoDiT"], "ring": True}
    cases["routed everywhere"] = {**cases["TubeletVideoDiT"], "module": str(everywhere)}
    found = offsets(cases, tmp_path)
    assert found["TubeletVideoDiT"] < 1e-5, found
    assert found["ring"] < 1e-5, found
    # the temporal attention left on this rank's frames, or the spatial attention run across
    # ranks (over two frames' patches): both differ
    assert found["unrouted TubeletVideoDiT"] > 1e-3, found
    assert found["routed everywhere"] > 1e-3, found
