"""`shard_div_attr` targets: which module attributes the processor reads as per-rank sizes.

Static checks on diffusers' own sources (QwenImage: the head count is read only in the per-head
ratio `attn.inner_dim // attn.heads` and absorbed by -1 -> not divided; Flux: -1 absorbs the head
count, the reason says so; Wan: `unflatten(2, (attn.heads, -1))` -> divided; LongCat-Audio:
`view(b, -1, attn.heads, attn.inner_dim // attn.heads)` -> both divided; OmniGen: the merge back to
`attn.out_dim` -> divided) and on invented fixtures (`tests/fixtures/models/corvid_ratio_dit.py`,
`heron_view_dit.py`, and inline sources).

The fixtures are also run: a 2-process gloo run (`tests/tp_gloo/worker.py`, PyTorch's
`parallelize_module` on CPU with the analyzer's layer styles, the analyzer's attributes divided by
the TP size) must match the single-process output, and the same plan with only the head count
divided (what the analyzer reported before this rule) must not.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import diffusers_file
from tests.gloo_launch import run_two_ranks

T = "models/transformers/"
REPO = Path(__file__).resolve().parents[1]
MODELS = Path(__file__).resolve().parent / "fixtures" / "models"
CORVID = MODELS / "corvid_ratio_dit.py"
HERON = MODELS / "heron_view_dit.py"
OSPREY = MODELS / "osprey_gqa_dit.py"
TOLERANCE = 1e-5
WORKER_TIMEOUT_S = 240


def _tp(path: Any, cls: str, **kwargs: Any) -> dict[str, Any]:
    result = analyze_path(path, cls, registry=False, **kwargs).to_json()
    (transformer,) = result["transformers"]
    return transformer["tensorParallel"]


# --- diffusers sources -------------------------------------------------------------------------


def test_qwenimage_ratio_head_count_is_not_divided():
    tp = _tp(diffusers_file(T + "transformer_qwenimage.py"), "QwenImageTransformer2DModel")
    attrs = set(tp["shardDivAttrs"])
    key = "transformer_blocks.*.attn.heads"
    # dividing `heads` alone doubles `attn.inner_dim // attn.heads`: both or neither
    assert (key in attrs) == ("transformer_blocks.*.attn.inner_dim" in attrs)
    assert attrs == set()
    reason = tp["shardDivSkipped"][key]
    assert "attn.inner_dim // attn.heads" in reason
    assert "-1 absorbs the head count" in reason
    assert "transformer_qwenimage.py:" in reason
    assert "per-rank sizes" in tp["strategyReasons"][0]


def test_flux_reasons_reflect_minus_one_absorption():
    tp = _tp(diffusers_file(T + "transformer_flux.py"), "FluxTransformer2DModel")
    for key in ("transformer_blocks.*.attn.heads", "single_transformer_blocks.*.attn.heads"):
        reason = tp["shardDivReasons"][key]
        assert "unflatten(-1, (-1, attn.head_dim))" in reason
        assert "lets -1 absorb the head count" in reason
        assert "not needed by the processor" in reason
    assert tp["shardDivSkipped"] == {}


def test_wan_head_count_is_a_per_rank_size():
    tp = _tp(diffusers_file(T + "transformer_wan.py"), "WanTransformer3DModel")
    assert tp["shardDivAttrs"] == ["blocks.*.attn1.heads", "blocks.*.attn2.heads"]
    reason = tp["shardDivReasons"]["blocks.*.attn1.heads"]
    assert "unflatten(2, (attn.heads, -1))" in reason and "per-rank size" in reason
    assert "absorb" not in reason


def test_longcat_audio_view_with_ratio_head_dim_divides_both():
    tp = _tp(diffusers_file(T + "transformer_longcat_audio_dit.py"), "LongCatAudioDiTTransformer")
    b = "blocks.*."
    for owner in ("self_attn", "cross_attn"):
        assert {b + owner + ".heads", b + owner + ".inner_dim"} <= set(tp["shardDivAttrs"])
    reason = tp["shardDivReasons"][b + "self_attn.inner_dim"]
    assert "per-head size" in reason and "self_attn.heads" in reason


def test_omnigen_merge_back_to_an_attribute_width_divides_it():
    tp = _tp(diffusers_file(T + "transformer_omnigen.py"), "OmniGenTransformer2DModel")
    assert "layers.*.self_attn.out_dim" in tp["shardDivAttrs"]
    assert "attn.out_dim" in tp["shardDivReasons"]["layers.*.self_attn.out_dim"]


# --- invented fixtures -------------------------------------------------------------------------


def test_fixture_ratio_processor_divides_nothing():
    tp = _tp(CORVID, "CorvidTransformer2DModel")
    assert tp["layers"]["blocks.*.attn.to_query"] == "colwise"
    assert tp["layers"]["blocks.*.attn.to_output"] == "rowwise"
    assert tp["shardDivAttrs"] == []
    reason = tp["shardDivSkipped"]["blocks.*.attn.heads"]
    assert "attn.inner_dim // attn.heads" in reason and "corvid_ratio_dit.py:" in reason
    # the undivided head count still has to split into whole heads per rank
    (warning,) = [w for w in tp["warnings"] if w["code"] == "CDIT301"]
    assert "blocks.*.attn.heads = 4" in warning["message"] and "whole heads" in warning["message"]
    assert "valid TP sizes: 2, 4" in warning["message"]


def test_fixture_view_processor_divides_count_and_ratio_partner():
    tp = _tp(HERON, "HeronTransformer2DModel")
    b = "layers.*."
    assert set(tp["shardDivAttrs"]) == {b + "mix.num_heads", b + "mix.width", b + "ctx.num_heads"}
    assert "per-rank size" in tp["shardDivReasons"][b + "mix.num_heads"]
    assert "view(batch, -1, attn.num_heads, head_dim)" in tp["shardDivReasons"][b + "mix.num_heads"]
    fixed = tp["shardDivReasons"][b + "ctx.num_heads"]
    assert "unflatten(-1, (-1, attn.head_size))" in fixed and "not needed" in fixed
    assert tp["shardDivSkipped"] == {}


_INLINE = """
import torch
import torch.nn as nn
from diffusers.models.modeling_utils import ModelMixin
from packed_kernels import packed_attention


class Attn(nn.Module):
    def __init__(self, dim, n_head, d_head):
        super().__init__()
        self.n_head = n_head
        self.d_head = d_head
        self.total = n_head * d_head
        self.q = nn.Linear(dim, self.total)
        self.k = nn.Linear(dim, self.total)
        self.v = nn.Linear(dim, self.total)
        self.o = nn.Linear(self.total, dim)

    def forward(self, x):
        BODY
        return self.o(out.flatten(2))


class Net(ModelMixin):
    def __init__(self, dim=64, n_head=4, d_head=16):
        super().__init__()
        self.blocks = nn.ModuleList([Attn(dim, n_head, d_head) for _ in range(2)])

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return x
"""


def _inline(tmp_path: Path, body: str) -> dict[str, Any]:
    text = textwrap.dedent(_INLINE).replace(
        "BODY", textwrap.dedent(body).strip().replace("\n", "\n        ")
    )
    path = tmp_path / "net.py"
    path.write_text(text)
    return _tp(path, "Net")


def test_head_count_passed_to_the_attention_call_is_divided(tmp_path):
    tp = _inline(
        tmp_path,
        """
        q = self.q(x).unflatten(-1, (-1, self.d_head))
        k = self.k(x).unflatten(-1, (-1, self.d_head))
        v = self.v(x).unflatten(-1, (-1, self.d_head))
        out = packed_attention(q, k, v, heads=self.n_head)
        """,
    )
    assert tp["shardDivAttrs"] == ["blocks.*.n_head"]
    reason = tp["shardDivReasons"]["blocks.*.n_head"]
    assert "head count passed to the attention call" in reason


def test_ratio_with_a_fixed_size_attribute_is_left_alone(tmp_path):
    tp = _inline(
        tmp_path,
        """
        size = self.total // self.n_head
        q = self.q(x).unflatten(-1, (-1, size))
        k = self.k(x).unflatten(-1, (-1, size))
        v = self.v(x).unflatten(-1, (-1, size))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        """,
    )
    assert tp["shardDivAttrs"] == []
    assert "total // n_head" in tp["shardDivSkipped"]["blocks.*.n_head"]
    assert "blocks.*.total" in tp["shardDivSkipped"]


def test_einops_head_axis_is_a_per_rank_size(tmp_path):
    tp = _inline(
        tmp_path,
        """
        from einops import rearrange
        q = rearrange(self.q(x), "b s (h d) -> b s h d", h=self.n_head)
        k = rearrange(self.k(x), "b s (h d) -> b s h d", h=self.n_head)
        v = rearrange(self.v(x), "b s (h d) -> b s h d", h=self.n_head)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        """,
    )
    assert tp["shardDivAttrs"] == ["blocks.*.n_head"]
    assert "per-rank size" in tp["shardDivReasons"]["blocks.*.n_head"]


# --- the fixtures run under tensor parallelism (2 gloo ranks, CPU) ----------------------------


def _generate_standalone(file: Path, cls: str, out: Path) -> Path:
    """analyze -> plan -> standalone module, with no edit: the path of the generated module."""
    from lsp_server.codegen import build_plan, generate, parse_plan, write

    analysis = analyze_path(file, cls, registry=False)
    target = out / f"{file.stem}_integration.py"
    answers = {"target": {"kind": "standalone", "path": str(target)}}
    plan, errors = parse_plan(build_plan(analysis.to_json(), answers))
    assert plan is not None, errors
    result = generate(plan, manifest_path=out / ".cdit" / "generated.json")
    assert result.ok and plan.generates_tp, result.to_json()
    write(result)
    return target


def _cases(out: Path) -> dict[str, dict[str, Any]]:
    corvid = _tp(CORVID, "CorvidTransformer2DModel")
    heron = _tp(HERON, "HeronTransformer2DModel")
    base = {
        "corvid": {"file": str(CORVID), "class": "CorvidTransformer2DModel"},
        "heron": {"file": str(HERON), "class": "HeronTransformer2DModel"},
    }
    osprey = _tp(OSPREY, "OspreyTransformer")
    without_context = {k: v for k, v in osprey["layers"].items() if ".attn.ctx_" not in k}
    return {
        # the generated module's own planner, untouched
        "osprey": {
            "file": str(OSPREY),
            "class": "OspreyTransformer",
            "planner": str(_generate_standalone(OSPREY, "OspreyTransformer", out)),
        },
        # control: the context projections left replicated (the branch behind
        # `options.get(...)` unexplored) must not reproduce the model
        "osprey_without_context": {"file": str(OSPREY), "class": "OspreyTransformer"}
        | {"layers": without_context, "shardDivAttrs": osprey["shardDivAttrs"]},
        "corvid": base["corvid"]
        | {"layers": corvid["layers"], "shardDivAttrs": corvid["shardDivAttrs"]},
        "corvid_heads_alone": base["corvid"]
        | {"layers": corvid["layers"], "shardDivAttrs": ["blocks.*.attn.heads"]},
        "heron": base["heron"]
        | {"layers": heron["layers"], "shardDivAttrs": heron["shardDivAttrs"]},
        "heron_heads_alone": base["heron"]
        | {
            "layers": heron["layers"],
            "shardDivAttrs": ["layers.*.mix.num_heads", "layers.*.ctx.num_heads"],
        },
    }


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case once on 2 gloo ranks: name -> rank 0's output tensor or the error text."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("tp_gloo")
    cases = _cases(out)
    worker = REPO / "tests" / "tp_gloo" / "worker.py"
    return run_two_ranks(worker, cases, out, WORKER_TIMEOUT_S)


def _baseline(file: Path, cls: str) -> Any:
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(REPO / "tests" / "tp_gloo"))
    try:
        import worker  # tests/tp_gloo/worker.py
    finally:
        sys.path.pop(0)
    model, x = worker.build(str(file), cls)
    with torch.no_grad():
        return model(*x) if isinstance(x, tuple) else model(x)


def test_osprey_attention_is_not_misread():
    """GQA with a derived kv head count, starred head reshape + per-head norms, rotate-half RoPE,
    a context branch behind `options.get(...)`, a cross-attention in every other block."""
    tp = _tp(OSPREY, "OspreyTransformer")
    kinds = {(r["layer"], r["kind"]) for r in tp["weightRearrangement"]}
    assert kinds == {("blocks.*.mlp.gate_up", "packed_gated")}  # not to_q / to_k (rotate-half)
    assert tp["distributedNorms"] == []  # q_norm / k_norm normalize one head: replicated
    for name in ("attn", "cross"):
        for proj in ("to_q", "to_k", "to_v", "ctx_k", "ctx_v"):
            assert tp["layers"][f"blocks.*.{name}.{proj}"] == "colwise"
    assert set(tp["conditionalLayers"]) == {
        f"blocks.*.cross.{p}" for p in ("to_q", "to_k", "to_v", "ctx_k", "ctx_v", "to_out")
    }
    assert tp["attentionStrategy"] == "gqa_sharded"
    assert tp["strategyBySize"]["4"] == "gqa_ffn_only"  # 2 kv heads


def test_osprey_generated_planner_matches_single_process(gloo_run: dict[str, Any]) -> None:
    pytest.importorskip("diffusers")
    baseline = _baseline(OSPREY, "OspreyTransformer")
    got = gloo_run["osprey"]
    if isinstance(got, str):
        pytest.fail(f"osprey: the generated planner failed\n{got[-4000:]}")
    assert baseline.abs().max() > 0.1
    diff = (got - baseline).abs().max().item()
    assert diff <= TOLERANCE, f"osprey: max abs diff {diff}"
    wrong = gloo_run["osprey_without_context"]
    if not isinstance(wrong, str):
        assert wrong.shape != baseline.shape or (wrong - baseline).abs().max().item() > 1e-2


@pytest.mark.parametrize(
    ("name", "file", "cls"),
    [("corvid", CORVID, "CorvidTransformer2DModel"), ("heron", HERON, "HeronTransformer2DModel")],
)
def test_inferred_attrs_run_under_tp_and_heads_alone_does_not(
    name: str, file: Path, cls: str, gloo_run: dict[str, Any]
) -> None:
    pytest.importorskip("diffusers")
    baseline = _baseline(file, cls)
    got = gloo_run[name]
    if isinstance(got, str):
        pytest.fail(f"{name}: TP run failed\n{got[-4000:]}")
    assert baseline.abs().max() > 0.1
    diff = (got - baseline).abs().max().item()
    assert diff <= TOLERANCE, f"{name}: max abs diff {diff}"
    wrong = gloo_run[f"{name}_heads_alone"]
    if not isinstance(wrong, str):  # it ran: then it must be wrong
        assert wrong.shape != baseline.shape or (wrong - baseline).abs().max().item() > 1e-2
