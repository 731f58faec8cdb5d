"""Work along the token axis in shapes serving-framework DiTs take
(`tests/fixtures/models/third_party/token_axis_dits.py`).

Before (2 gloo ranks, Ulysses, against one process): an attention kernel picked from a table of
functions ran unrouted (0.059 off); queries and keys normalized over the tokens, keys softmaxed
over the tokens, a softmax scale from the sequence length or `log(n)`, a token shift by pad and
cut or by `nn.ZeroPad2d`, an FFT over the tokens all ran and were wrong (0.017 to 11.3 off);
token mixing by a Linear over the token axis or a `(tokens, tokens)` matrix stopped on a size;
a learned or fixed position table added whole before the blocks stopped under the root split,
a model's fixed token order applied by `torch.take_along_dim` returned 32 tokens for 16, and rows
put back by `scatter` / `index_copy` after the blocks were put back after the gather (stopped),
and a context embedded in the tokens' tuple assignment (`x, ctx = self.x_in(tokens),
self.c_in(context)`) was root-split with them (0.11 off).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES

SHAPES = FIXTURES / "models" / "third_party" / "token_axis_dits.py"


def _cp(cls: str) -> dict[str, Any]:
    (t,) = analyze_path(SHAPES, cls, registry=False).to_json()["transformers"]
    return t["contextParallel"]


def _refusal(cls: str) -> str:
    cp = _cp(cls)
    assert cp["approach"] == "none" and not cp["plan"], (cls, cp["approach"])
    return " ".join(w["message"] for w in cp["warnings"] if w["code"] == "CDIT220")


@pytest.mark.parametrize(
    ("cls", "why"),
    [
        ("TableBackendDiT", "picks its attention kernel from a table (`ATTN_FNS[self.backend]"),
        ("PickedKernelDiT", "the table `KERNELS` holding `_sdpa_kernel`"),
        ("TokenNormDiT", "reduces over the tokens it sees (`F.normalize(q, dim=-2)`)"),
        ("SoftKeyDiT", "reduces over the tokens it sees (`k.softmax(dim=-2)`)"),
        ("LengthScaleDiT", "computes a number from the length of the tokens it sees"),
        ("LogScaleDiT", "length of the tokens it sees (`math.log(n)`)"),
        ("PadShiftDiT", "pairs each token with its neighbours (`F.pad(h, (0, 0, 1, 0))`)"),
        ("TimeShiftDiT", "pads the tokens it sees with `nn.ZeroPad2d((0, 0, 1, -1))`"),
        ("FourierDiT", "transforms over the tokens"),
        (
            "Fourier2DiT",
            "transforms over the tokens (every output from every token) (`torch.fft.fft2",
        ),
        ("TokenMixerDiT", "mixes the tokens through weights over the token axis (`self.token_mlp"),
        ("MatrixMixDiT", "weights over the token axis (`self.mix @ self.norm(x)`)"),
    ],
)
def test_work_along_the_token_axis_refuses_context_parallelism(cls: str, why: str) -> None:
    """Each ran and was wrong (or stopped) under the plan generated before."""
    assert why in _refusal(cls)


@pytest.mark.parametrize(
    ("cls", "why"),
    [
        ("ShiftMlpDiT", "torch.roll(h, shifts=1, dims=1)"),
        ("CumsumDiT", "torch.cumsum(self.norm(x), dim=1)"),
        ("FlipScanDiT", "h.cumsum(1)"),
        ("OddRegisterDiT", "joins tokens of its own to the stream"),
        ("MhaPaddingDiT", "torch.nn.MultiheadAttention"),
    ],
)
def test_shapes_refused_before_stay_refused(cls: str, why: str) -> None:
    assert why in " ".join(w["message"] for w in _cp(cls)["warnings"])


def test_qk_norm_over_the_features_stays_routed() -> None:
    """`F.normalize(q, dim=-1)` is per token: the root split and the route stay."""
    cp = _cp("FeatureNormDiT")
    assert cp["approach"] == "root_split"
    assert [r["class"] for r in cp["sdpaRoutes"]] == ["FeatureNormAttention"]


def test_a_table_added_whole_before_the_blocks_moves_the_split_to_the_first_block() -> None:
    for cls, table in (("SortedTokensDiT", "self.pos"), ("SincosTableDiT", "self.pos_table")):
        cp = _cp(cls)
        assert cp["approach"] == "single_point" and "" not in cp["plan"], cls
        assert set(cp["plan"]["blocks.0"]) == {"x"}
        assert any(f"combines `{table}`" in e["message"] for e in cp["evidence"]), cls


def test_rows_picked_at_indices_of_the_model_before_the_blocks_block_the_root_split() -> None:
    """`torch.take_along_dim(x, order, dim=1)` with the model's fixed order (a root split ran
    and returned 32 tokens for 16)."""
    cp = _cp("TakeAlongDiT")
    assert cp["approach"] == "single_point" and "" not in cp["plan"]
    assert any("picks rows of the token stream" in e["message"] for e in cp["evidence"])


@pytest.mark.parametrize("cls", ["SortedTokensDiT", "PermutedTokensDiT", "TakeAlongDiT"])
def test_rows_put_back_at_sequence_wide_indices_are_put_back_after_the_gather(cls: str) -> None:
    """`torch.zeros_like(x).scatter(1, index, x)`, `torch.empty_like(x).index_copy(1, perm, x)`
    after the loop: the indices number the whole sequence, so the gather is at the last block,
    not at the head after them."""
    plan = _cp(cls)["plan"]
    assert "x_out" not in plan and plan["blocks.<last>"]["gather_dim"] == 1


@pytest.mark.parametrize("cls", ["TupleContextDiT", "TupleTripleDiT"])
def test_a_context_embedded_in_the_tokens_tuple_assignment_is_not_root_split(cls: str) -> None:
    """`x, ctx = self.x_in(tokens), self.c_in(context)`: `x` is made of `tokens` alone; the
    context was root-split and the blocks' cross-attention read half of it on each rank."""
    cp = _cp(cls)
    assert cp["approach"] == "root_split"
    assert set(cp["plan"][""]) == {"tokens"}


def _before_plans(cases: dict[str, dict[str, str]], tmp_path: Path) -> None:
    """The plans generated before, as controls: a root split of `SincosTableDiT` and
    `TakeAlongDiT`, `SortedTokensDiT` and `PermutedTokensDiT` gathered at the head after the
    rows are put back."""
    root = ('"blocks.0": {\n            "x":', '"": {\n            "tokens":')
    head = ('f"blocks.{len(transformer.blocks) - 1}"', '"x_out"')
    edits = {
        "SincosTableDiT": root,
        "TakeAlongDiT": root,
        "SortedTokensDiT": head,
        "PermutedTokensDiT": head,
    }
    for cls, (old, new) in edits.items():
        text = Path(cases[cls]["module"]).read_text()
        assert old in text, cls
        control = tmp_path / f"before_{cls}.py"
        control.write_text(text.replace(old, new))
        cases[f"before {cls}"] = {**cases[cls], "module": str(control)}


def test_the_plans_run_right_on_two_gloo_ranks(tmp_path: Path) -> None:
    """Generated modules match one process on 2 gloo ranks (Ulysses); every control (without
    the SDPA route, or the plan generated before) is off or stops."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    from tests.cp_runs import WORKER, routed_cases
    from tests.gloo_launch import run_two_ranks
    from tests.redteam_cp_worker import build

    exact = ("FeatureNormDiT", "RunningMeanDiT", "SlidingMaskDiT", "PaddedSamplesDiT")
    exact += ("TupleContextDiT", "TupleTripleDiT")
    moved = ("SortedTokensDiT", "SincosTableDiT", "PermutedTokensDiT", "TakeAlongDiT")
    classes = (*exact, *moved)
    cases = routed_cases(SHAPES, classes, tmp_path, classes)
    _before_plans(cases, tmp_path)
    got = run_two_ranks(WORKER, cases, tmp_path)
    for name, spec in cases.items():
        model, inputs = build(spec["fixture"], spec["cls"])
        with torch.no_grad():
            baseline = model(**inputs)
        result = got[name]
        if name.startswith(("unrouted", "before")):
            ran = isinstance(result, torch.Tensor) and result.shape == baseline.shape
            assert not ran or (result - baseline).abs().max().item() > 1e-2, name
            continue
        assert isinstance(result, torch.Tensor), (name, result)
        assert result.shape == baseline.shape, (name, result.shape)
        assert (result - baseline).abs().max().item() < 1e-4, name
