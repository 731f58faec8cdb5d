"""Empirical check of the analyzer's context-parallel plans, and unit tests of `to_cache_dit_plan`.

For each case in `tests/cp_gloo/cp_cases.py` (a tiny seeded random-weight model built from the real
diffusers class) the analyzer's inferred plan — `analyze_path(<diffusers file>, <class>,
registry=False).transformers[0].context_parallel.to_json()["plan"]` — is applied through cache-dit
(`enable_cache(model, cache_config=None, parallelism_config=ParallelismConfig(ulysses_size=2,
cp_plan=to_cache_dit_plan(...)))`, "native" attention) in a 2-process gloo run on CPU
(`tests/cp_gloo/worker.py`, two plain processes with torchrun's environment variables; the process
group is initialised with gloo there). Rank 0's output must match a single-process baseline to
1e-4 (fp32). All sequence lengths are even (no UAA on gloo).

A case marked `generated` runs the standalone module `generate` writes for it instead (its
`enable()`: hook plan, mask permutation, local attention outside the split list), together with
controls that each skip one of its steps and must be wrong.

A case whose inferred plan is wrong is marked `xfail(strict=True)` with the evidence, so a fix in
the analyzer turns it into an XPASS failure that asks for the marker to be removed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
pytest.importorskip("cache_dit")

from tests.conftest import diffusers_file  # noqa: E402
from tests.cp_plan_json import to_cache_dit_plan  # noqa: E402
from tests.gloo_launch import run_two_ranks  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CP_GLOO = Path(__file__).resolve().parent / "cp_gloo"
TOLERANCE = 1e-4
# every case runs in one two-rank launch (about 130 runs, ~4 min alone on 2 CPU cores): the
# limit only catches a hung rank
WORKER_TIMEOUT_S = 900


def _load_cases() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cp_cases", CP_GLOO / "cp_cases.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("cp_cases", module)
    spec.loader.exec_module(module)
    return module


cp_cases = _load_cases()


# ---------------------------------------------------------------- unit: to_cache_dit_plan


class _Block(torch.nn.Module):
    def forward(self, hidden_states, encoder_hidden_states=None, temb=None):
        return hidden_states


class _Rope(torch.nn.Module):
    def forward(self, hidden_states):
        return hidden_states, hidden_states


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rope = _Rope()
        self.blocks = torch.nn.ModuleList([_Block() for _ in range(3)])
        self.proj_out = torch.nn.Linear(2, 2)

    def forward(self, hidden_states, encoder_hidden_states=None, timestep=None):
        return hidden_states


def _split(dim: int, ndim: int | None, out: bool = False) -> dict[str, Any]:
    return {"split_dim": dim, "expected_dims": ndim, "split_output": out, "reason": "r", "line": 1}


def test_to_cache_dit_plan_converts_every_entry_kind() -> None:
    from cache_dit.distributed.core import _ContextParallelInput as In
    from cache_dit.distributed.core import _ContextParallelOutput as Out

    plan = to_cache_dit_plan(
        {
            "": {"hidden_states": _split(1, 3), "timestep": _split(1, 2)},
            "rope": {"0": _split(1, 4, True), "1": _split(1, None, True)},
            "blocks.<each>": {"encoder_hidden_states": _split(1, 3)},
            "blocks.<last>": {"gather_dim": 1, "expected_dims": 3, "outputs": 2, "reason": "x"},
            "proj_out": {"gather_dim": 1, "expected_dims": 3, "outputs": 1, "line": 9},
        },
        _Model(),
    )

    assert plan[""] == {"hidden_states": In(1, 3), "timestep": In(1, 2)}
    assert plan["rope"] == {0: In(1, 4, True), 1: In(1, None, True)}
    assert all(isinstance(k, int) for k in plan["rope"])
    # <each>: one key per block; <last> resolves to the last index and merges with blocks.2's split
    assert plan["blocks.0"] == {"encoder_hidden_states": In(1, 3)}
    assert plan["blocks.1"] == {"encoder_hidden_states": In(1, 3)}
    assert plan["blocks.2"] == [{"encoder_hidden_states": In(1, 3)}, (Out(1, 3), Out(1, 3))]
    assert plan["proj_out"] == Out(1, 3)
    assert "blocks.<each>" not in plan and "blocks.<last>" not in plan


def test_to_cache_dit_plan_last_alone_and_tuple_gather() -> None:
    from cache_dit.distributed.core import _ContextParallelOutput as Out

    plan = to_cache_dit_plan(
        {"blocks.<last>": {"gather_dim": 1, "expected_dims": 3, "outputs": 2}}, _Model()
    )
    assert plan == {"blocks.2": (Out(1, 3), Out(1, 3))}


def test_to_cache_dit_plan_keeps_wildcards_and_takes_the_whole_cp_object() -> None:
    from cache_dit.distributed.core import _ContextParallelInput as In

    cp_json = {"approach": "single_point", "plan": {"blocks.*": {"temb": _split(1, 2)}}}
    assert to_cache_dit_plan(cp_json, _Model()) == {"blocks.*": {"temb": In(1, 2)}}


def test_to_cache_dit_plan_accepts_the_analyzer_json_for_flux() -> None:
    from cache_dit.distributed.core import _ContextParallelInput as In
    from cache_dit.distributed.core import _ContextParallelOutput as Out

    from lsp_server.analysis import analyze_path

    case = cp_cases.CASES["flux"]
    result = analyze_path(diffusers_file(case.module_file), case.class_name, registry=False)
    plan_json = result.transformers[0].context_parallel.to_json()["plan"]
    model, _ = case.build()
    assert to_cache_dit_plan(plan_json, model) == {
        "": {
            "hidden_states": In(1, 3),
            "encoder_hidden_states": In(1, 3),
            "img_ids": In(0, 2),
            "txt_ids": In(0, 2),
        },
        "proj_out": Out(1, 3),
    }


@pytest.mark.parametrize(
    ("plan_json", "message"),
    [
        ({"missing": {"gather_dim": 1, "expected_dims": 3}}, "`missing` is not a submodule"),
        ({"blocks.7": {"hidden_states": _split(1, 3)}}, "`7` is not a submodule of `blocks`"),
        ({"proj_out.<last>": {"gather_dim": 1}}, "needs a ModuleList"),
        ({"blocks.0": {"not_a_param": _split(1, 3)}}, "`not_a_param` is not a parameter"),
        ({"rope": {"first": _split(1, 4, True)}}, "must be an output index"),
        ({"proj_out": {"gather_dim": "1"}}, "`gather_dim` must be an int"),
    ],
)
def test_to_cache_dit_plan_rejects_bad_entries(plan_json: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        to_cache_dit_plan(plan_json, _Model())


# -------------------------------------------------------- empirical: 2-process gloo CP run

# With a text mask the hook plan alone cannot be right: the attention processor builds or pads
# the mask from the lengths it sees, while Ulysses gathers the keys to full length. The analyzer
# must report that processor patch (CDIT219); the hook-only run is then expected to fail.
NEEDS_PROCESSOR_PATCH = (
    "hook plan only: the processor builds/pads the attention mask from local lengths "
    "(QwenImage: cat([text mask, image ones]); LTX: prepare_attention_mask); the analyzer reports "
    "the patch (CDIT219), which this run does not apply"
)

CASES = [
    pytest.param("flux", id="flux-root-split"),
    pytest.param("wan", id="wan-blocks0-rope-output-split"),
    pytest.param("qwenimage", id="qwenimage-block0-pos_embed-output-split"),
    pytest.param("skyreels", id="skyreels-blocks0-rope-per-block-encoder-split"),
    pytest.param("echo_rope", id="invented-rope-reread-after-the-gather-split-per-block"),
    pytest.param("kandinsky5", id="kandinsky5-generated-module-text-blocks-local"),
    pytest.param("duet_mask", id="invented-joint-mask-reordered-generated-module"),
    pytest.param("duet_join", id="invented-block-joined-streams-mask-reordered"),
    pytest.param("duet_mask__ring", id="invented-joint-mask-reordered-under-ring"),
    pytest.param("duet_join__ring", id="invented-block-joined-streams-under-ring"),
    pytest.param("plain_sdpa", id="invented-plain-modules-calling-sdpa-routed"),
    pytest.param("plain_sdpa__ring", id="invented-plain-modules-calling-sdpa-routed-ring"),
    pytest.param("dit", id="dit-attnprocessor2_0-sdpa-routed"),
    pytest.param("dit__ring", id="dit-attnprocessor2_0-sdpa-routed-ring"),
    pytest.param("sd3", id="sd3-processor-built-as-a-local-sdpa-routed"),
    pytest.param("sd3__ring", id="sd3-sdpa-routed-ring"),
    pytest.param("sit_like", id="third-party-dit-class-named-attention-calling-sdpa"),
    pytest.param("sit_like__ring", id="third-party-dit-ring"),
    pytest.param("sit_like__tp", id="third-party-dit-tp-planner-outside-cache-dit"),
    pytest.param("tide_video__tp", id="third-party-video-tp-distributed-rmsnorm-outside-cache-dit"),
    pytest.param("flash", id="third-party-flash-attn-func-rebound"),
    pytest.param("flash__ring", id="third-party-flash-attn-func-under-ring"),
    pytest.param("flash_fallback", id="third-party-flash-or-sdpa-helper-both-routed"),
    pytest.param("cis", id="third-party-llama-freqs-cis-cut-to-length-split-per-block"),
    pytest.param("cis__ring", id="third-party-llama-freqs-cis-under-ring"),
    pytest.param("cis__tp", id="third-party-width-read-from-a-shape-tp-replicated"),
    pytest.param("cis_kw", id="third-party-table-in-a-keyword-dict-split-per-block"),
    pytest.param("runner", id="third-party-blocks-handed-to-auto-grad-checkpoint"),
    pytest.param("timm_flag", id="third-party-run-time-fused-attn-switch-pinned"),
    pytest.param("timm_flag__ring", id="third-party-run-time-fused-attn-switch-pinned-ring"),
    pytest.param("runner__ring", id="third-party-blocks-handed-to-a-runner-under-ring"),
    pytest.param("runner__tp", id="third-party-blocks-handed-to-a-runner-tp"),
    pytest.param("method_runner", id="third-party-blocks-run-through-a-method"),
    pytest.param("ref_mmdit", id="third-party-mmdit-ids-beside-tokens-free-sdpa-function"),
    pytest.param("frame_forcing", id="invented-per-frame-timesteps-repeated-per-token"),
    pytest.param("frame_forcing__ring", id="invented-per-frame-timesteps-repeated-under-ring"),
    pytest.param("expand_forcing", id="invented-per-frame-timesteps-broadcast-and-flattened"),
    pytest.param("broadcast_temb", id="invented-timestep-broadcast-to-tokens-then-modulated"),
    pytest.param("table_rope", id="third-party-rotary-rows-picked-by-forward-arange"),
    pytest.param("table_rope__ring", id="third-party-rotary-rows-picked-by-arange-ring"),
    pytest.param("stack_rope", id="third-party-rotary-angles-stacked-and-unsqueezed"),
    pytest.param("seq_first", id="third-party-sequence-first-blocks-split-on-axis-0"),
    pytest.param("seq_first__ring", id="third-party-sequence-first-blocks-under-ring"),
    pytest.param("detr_style", id="third-party-detr-style-permuted-grid-tokens"),
    pytest.param("ref_mmdit__ring", id="third-party-mmdit-under-ring"),
    pytest.param("keyword_mmdit", id="keyword-only-blocks-rope-from-a-plain-method"),
    pytest.param("keyword_mmdit__ring", id="keyword-only-blocks-under-ring"),
    pytest.param("keyword_mmdit__tp", id="keyword-only-blocks-tp-planner-outside-cache-dit"),
    pytest.param("sequential", id="third-party-blocks-in-an-iterated-nn-sequential"),
    pytest.param("sequential__ring", id="third-party-blocks-in-an-nn-sequential-ring"),
    pytest.param("sequential__tp", id="third-party-blocks-in-an-nn-sequential-tp"),
    pytest.param("output_dict", id="third-party-blocks-returning-a-dict-of-outputs"),
    pytest.param("output_dict__ring", id="third-party-blocks-returning-a-dict-ring"),
    pytest.param("output_dict__tp", id="third-party-blocks-returning-a-dict-tp"),
    pytest.param("free_rope", id="invented-rope-tuple-from-a-module-function-split-on-rows"),
    pytest.param("free_rope__ring", id="invented-rope-tuple-from-a-module-function-ring"),
    pytest.param("used_rope", id="invented-rope-axis-read-where-the-queries-meet-it"),
    pytest.param("used_rope__ring", id="invented-rope-axis-read-from-its-use-ring"),
    pytest.param("mirror_grid", id="invented-angle-grid-flattened-as-the-latent-is"),
    pytest.param("mirror_grid__ring", id="invented-angle-grid-flattened-as-the-latent-ring"),
    pytest.param("index_rope", id="invented-rope-pairs-table-read-through-integer-indices"),
    pytest.param("index_rope__ring", id="invented-rope-pairs-table-integer-indices-ring"),
    pytest.param("rotate_call", id="invented-rope-sines-meet-a-called-rotation-of-the-queries"),
    pytest.param("joint_tokens", id="invented-text-joined-in-front-table-joined-the-same-way"),
    pytest.param("joint_tokens__ring", id="invented-text-joined-in-front-under-ring"),
    pytest.param("handback", id="third-party-blocks-handing-the-conditioning-back"),
    pytest.param("handback__ring", id="third-party-blocks-handing-the-conditioning-back-ring"),
    pytest.param("keep_first", id="third-party-loop-keeping-the-first-of-two-outputs"),
    pytest.param("keep_first__ring", id="third-party-loop-keeping-the-first-output-ring"),
    pytest.param("handback__tp", id="third-party-blocks-handing-the-conditioning-back-tp"),
    pytest.param("mode_dict", id="third-party-lists-held-in-a-module-dict"),
    pytest.param("mode_dict__ring", id="third-party-lists-held-in-a-module-dict-ring"),
    pytest.param("mode_dict__tp", id="third-party-lists-held-in-a-module-dict-tp"),
    pytest.param("wide_mode_dict", id="third-party-module-dict-by-comprehension"),
    pytest.param("wide_mode_dict__tp", id="third-party-module-dict-by-comprehension-tp"),
    pytest.param("stage_lists", id="third-party-lists-nested-in-a-module-list"),
    pytest.param("stage_lists__ring", id="third-party-lists-nested-in-a-module-list-ring"),
    pytest.param("stage_lists__tp", id="third-party-lists-nested-in-a-module-list-tp"),
    pytest.param("window_global", id="third-party-global-twin-of-the-window-model"),
    pytest.param("window_global__ring", id="third-party-global-twin-of-the-window-model-ring"),
    pytest.param("window_global__tp", id="third-party-global-twin-of-the-window-model-tp"),
    pytest.param("window_forced__tp", id="third-party-window-attention-under-tp"),
    pytest.param("keep_first__tp", id="third-party-loop-keeping-the-first-output-tp"),
    pytest.param("ref_mmdit__tp", id="third-party-mmdit-tp-planner-outside-cache-dit"),
    pytest.param("learned_pos", id="third-party-learned-positions-cut-to-the-stream-length"),
    pytest.param("cut_table", id="third-party-position-buffer-cut-to-a-measured-length"),
    pytest.param("pooled_cond", id="third-party-tokens-pooled-into-the-condition-before-blocks"),
    pytest.param("uvit", id="third-party-uvit-condition-tokens-long-skips-middle-block"),
    pytest.param("minimax_h3", id="minimax-h3-packed-rows-adaln-ids-split-generated-module"),
    pytest.param("packed_rows", id="third-party-packed-rows-per-token-adaln-ids-split"),
    pytest.param("packed_rows__ring", id="third-party-packed-rows-per-token-adaln-ids-ring"),
    pytest.param("grid_rope", id="third-party-grid-rope-flattened-in-forward-setattr-modules"),
    pytest.param("grid_rope__ring", id="third-party-grid-rope-flattened-in-forward-ring"),
    pytest.param("inline_rope", id="invented-inline-arange-rope-split-at-first-block"),
    pytest.param("inline_rope__ring", id="invented-inline-arange-rope-under-ring"),
    pytest.param("register_tokens", id="invented-register-tokens-inline-angle-table"),
    pytest.param("register_tokens__ring", id="invented-register-tokens-under-ring"),
    pytest.param("valid_frames", id="invented-padded-clips-mask-per-token-and-as-key-mask"),
    pytest.param("valid_frames__ring", id="invented-padded-clips-mask-gathered-under-ring"),
    pytest.param("packed_segment", id="invented-packed-images-block-diagonal-mask"),
    pytest.param("packed_segment__ring", id="invented-packed-images-mask-under-ring"),
    pytest.param("fn_table", id="invented-table-from-a-function-handed-the-length-block-split"),
    pytest.param("fn_table__ring", id="invented-table-from-a-function-handed-the-length-ring"),
    pytest.param("method_table", id="invented-table-from-a-method-linspace-block-split"),
    pytest.param("plain_name", id="invented-table-named-table-split-where-blocks-get-it"),
    pytest.param("plain_name__ring", id="invented-table-named-table-ring"),
    pytest.param("cut_name", id="invented-table-named-pe-cache-cut-by-the-block"),
    pytest.param("cut_cache", id="invented-constant-length-table-rows-picked-by-split-ids"),
    pytest.param("caller_table", id="invented-caller-tables-even-odd-axis-read-from-their-use"),
    pytest.param("cut_cache__ring", id="invented-constant-length-table-split-ids-ring"),
    pytest.param("variant_wide", id="invented-variant-inherits-a-measuring-rope-block-split"),
    pytest.param("variant_wide__ring", id="invented-variant-inherits-a-measuring-rope-ring"),
    pytest.param("variant_residual", id="invented-variant-residual-loop-caller-tables-at-blocks"),
    pytest.param("variant_residual__ring", id="invented-variant-residual-loop-caller-tables-ring"),
    pytest.param(
        "qwenimage_mask",
        id="qwenimage-with-text-mask",
        marks=pytest.mark.xfail(strict=True, reason=NEEDS_PROCESSOR_PATCH),
    ),
    pytest.param(
        "ltx",
        id="ltx-root-split-rope-with-text-mask",
        marks=pytest.mark.xfail(strict=True, reason=NEEDS_PROCESSOR_PATCH),
    ),
]


def test_a_refused_cp_part_stops_before_the_model_runs(gloo_run: dict[str, Any]) -> None:
    """TideVideo's CP is refused (whole grid sizes reach the blocks): its module's `enable()`
    stops with the reason under Ulysses and ring instead of running a wrong split."""
    for name in [n for n in ("tide_video", "tide_video__ring") if n in gloo_run]:
        got = gloo_run[name]
        assert isinstance(got, str), name
        assert "NotImplementedError: context parallelism is not part of this integration" in got
        assert "grid_sizes" in got


@pytest.mark.parametrize("name", ["imported_table"])
def test_a_table_whose_axis_is_not_read_stops_before_the_model_runs(
    name: str, gloo_run: dict[str, Any]
) -> None:
    """ImportedTableDiT's table comes from diffusers' `get_1d_rotary_pos_embed` handed the
    stream's length: no root split (position drift), and its axis is read neither from the
    imported function nor from its use (an `(S, D)` table against `(B, H, S, D)` queries could
    be `(1, 1, S, D)` too): the module's `enable()` stops with the reason."""
    got = gloo_run[name]
    assert isinstance(got, str), f"{name} ran: its CP part must be refused"
    assert "NotImplementedError: context parallelism is not part of this integration" in got
    assert "`cos`" in got and "sequence axis is read neither" in got


@pytest.mark.parametrize("name", ["qwenimage_mask", "ltx"])
def test_mask_building_processors_are_reported_as_patches(name: str) -> None:
    from lsp_server.analysis import analyze_path

    case = cp_cases.CASES[name]
    (t,) = analyze_path(
        diffusers_file(case.module_file), case.class_name, registry=False
    ).to_json()["transformers"]
    # only with a mask: reported apart (codegen guards calls that pass one)
    assert any("mask" in p["message"] for p in t["contextParallel"]["maskPatches"])
    assert any(d["code"] == "CDIT219" for d in t["diagnostics"])


def _generated_module(analysis: dict[str, Any], target: Path) -> Path:
    """The standalone module `generate` writes for `analysis` (no edits)."""
    from lsp_server.codegen import build_plan, generate, parse_plan, write

    answers = {"target": {"kind": "standalone", "path": str(target)}}
    plan, errors = parse_plan(build_plan(analysis, answers))
    assert plan is not None, errors
    result = generate(plan, manifest_path=target.parent / ".cdit" / "generated.json")
    assert result.ok, result.to_json()
    write(result)
    return target


RING_MASKS = "_ring_attention_masks()"
TP_OUTSIDE_CACHE_DIT = "config = _without_tp(config)"
ROUTE = "_route_sdpa(model)"
# (variant, code, replacement, the cases it runs for: None = every case whose code has it);
# a tuple of codes is replaced pairwise by a tuple of replacements
MUTANTS: tuple[tuple[str, Any, Any, tuple[str, ...] | None], ...] = (
    ("no_reorder", "_reorder_masks(model, world)", "pass", None),
    ("no_local", "_local_attention_outside(model)", "pass", None),
    ("no_route", ROUTE, "pass", None),
    (
        "ring_own_shard",
        "source = (rank - next(steps)) % world",
        "source = rank + 0 * next(steps)",
        None,
    ),
    # the mask columns of the ranks' keys joined in the wrong order (the keys' order reversed)
    ("keys_reversed", "zip(parts, counts)", "zip(parts[::-1], counts[::-1])", ("valid_frames",)),
    # the stream split at the root instead (the table left to forward): forward's
    # `torch.arange(x.shape[1])` then counts this rank's tokens from 0
    (
        "root_split",
        '"blocks.*": {\n            "ang": _ContextParallelInput(split_dim=0),\n        },\n'
        '        "blocks.0": {',
        '"": {',
        ("inline_rope",),
    ),
    # the position ids left whole: the rotary table forward builds from them keeps every
    # token's row while the queries hold this rank's
    (
        "ids_whole",
        '            "img_ids": _ContextParallelInput(split_dim=1, expected_dims=3),\n',
        "",
        ("ref_mmdit",),
    ),
    # the rotary table of a plain method left whole for the second list: its blocks pair this
    # rank's tokens with every token's rotation
    (
        "later_rope_whole",
        '        "solo_blocks.*": {\n            "rope": [\n'
        "                _ContextParallelInput(split_dim=0),\n"
        "                _ContextParallelInput(split_dim=0),\n"
        "            ],\n        },\n",
        "",
        ("keyword_mmdit",),
    ),
    # the rotary table split on axis 1 (what the plan guessed before the axis was read through
    # the method): the rotation's features are cut instead of its rows
    (
        "rope_axis_1",
        "_ContextParallelInput(split_dim=0)",
        "_ContextParallelInput(split_dim=1)",
        ("keyword_mmdit", "free_rope", "used_rope", "index_rope"),
    ),
    # the `(cos, sin)` pair met by a called rotation of the queries split on the batch axis
    (
        "rope_pair_axis_0",
        '"rope": [\n                _ContextParallelInput(split_dim=1),\n'
        "                _ContextParallelInput(split_dim=1),\n",
        '"rope": [\n                _ContextParallelInput(split_dim=0),\n'
        "                _ContextParallelInput(split_dim=0),\n",
        ("rotate_call",),
    ),
    # the angle grid flattened as the latent is, split on the batch axis instead of its rows
    (
        "mirror_axis_0",
        '"rope": _ContextParallelInput(split_dim=1),',
        '"rope": _ContextParallelInput(split_dim=0),',
        ("mirror_grid",),
    ),
    # the fused q/k/v + MLP projection sharded like any other (its output split in the middle
    # of q/k/v): what plain ColwiseParallel does
    (
        "fused_sharded__tp",
        '"linear1": ColwiseParallel(output_layouts=Replicate())',
        '"linear1": ColwiseParallel()',
        ("ref_mmdit",),
    ),
    # flash_attn_func left as it is (an SDPA route alone): the path GPUs with flash-attn take
    (
        "flash_unrouted",
        "namespace[bare] = flash_route(namespace[bare])",
        "pass",
        ("flash", "flash_fallback"),
    ),
    # the rotary table split on axis 1 (the convention used before its axis was read)
    (
        "table_axis_1",
        '"freqs_cis": _ContextParallelInput(split_dim=0)',
        '"freqs_cis": _ContextParallelInput(split_dim=1)',
        ("cis", "cis_kw"),
    ),
    # the attention's projections sharded although its output is reshaped to the width read
    # from the block input's shape (`b, n, d = x.shape` ... `reshape(b, n, d)`)
    (
        "whole_width_sharded__tp",
        (
            '"attention.wq": ColwiseParallel(output_layouts=Replicate())',
            '"attention.wk": ColwiseParallel(output_layouts=Replicate())',
            '"attention.wv": ColwiseParallel(output_layouts=Replicate())',
            '"attention.wo": RowwiseParallel(input_layouts=Replicate())',
        ),
        (
            '"attention.wq": ColwiseParallel()',
            '"attention.wk": ColwiseParallel()',
            '"attention.wv": ColwiseParallel()',
            '"attention.wo": RowwiseParallel()',
        ),
        ("cis",),
    ),
    # the run-time attention switch left as the model set it: the hand-computed branch runs on
    # each rank's tokens (the route reaches only SDPA)
    ("flag_unpinned", "setattr(runs, attr, value)", "pass", ("timm_flag",)),
    # the rotary rows picked by forward's `arange` split on axis 1 (the convention before the
    # caller's positions were read)
    (
        "rows_axis_1",
        "0: _ContextParallelInput(split_dim=0, split_output=True),",
        "0: _ContextParallelInput(split_dim=1, split_output=True),",
        ("table_rope", "stack_rope"),
    ),
    # the flattened position grid, and the rows of the setattr-attached table, split on their
    # feature axis (axis 2) instead of the token axis
    (
        "grid_axis_2",
        '"grid": _ContextParallelInput(split_dim=0),',
        '"grid": _ContextParallelInput(split_dim=2),',
        ("grid_rope",),
    ),
    (
        "track_axis_2",
        "0: _ContextParallelInput(split_dim=0, split_output=True),",
        "0: _ContextParallelInput(split_dim=2, split_output=True),",
        ("grid_rope",),
    ),
    # the root split the analysis chose before: every rank cuts the first rows of the learned
    # position table (runs, and is wrong)
    ("root_split_cut", '"blocks.0": {', '"": {', ("learned_pos", "cut_table", "pooled_cond")),
    # the per-token AdaLN row ids left whole, and the gather moved after the output norm that
    # picks rows by them (each rank's tokens next to every token's ids)
    (
        "level_ids_whole",
        '"level_ids": _ContextParallelInput(split_dim=0, expected_dims=1),',
        "",
        None,
    ),
    (
        "adaln_ids_whole",
        '            "adaln_indices": _ContextParallelInput(\n'
        "                split_dim=0,\n"
        "                expected_dims=1,\n"
        "            ),\n",
        "",
        ("minimax_h3",),
    ),
    (
        "gather_after_norm",
        'f"layers.{len(transformer.layers) - 1}",',
        '"norm_out",',
        ("packed_rows",),
    ),
    # the sequence-first stream split and gathered on axis 1 (the batch-first convention): the
    # batch is cut instead of the tokens
    (
        "batch_axis",
        (
            '"x": _ContextParallelInput(split_dim=0, expected_dims=3)',
            "_ContextParallelOutput(gather_dim=0, expected_dims=3)",
        ),
        (
            '"x": _ContextParallelInput(split_dim=1, expected_dims=3)',
            "_ContextParallelOutput(gather_dim=1, expected_dims=3)",
        ),
        ("seq_first", "detr_style"),
    ),
    # the per-frame conditioning expanded to one row per token left whole: every block gets this
    # rank's tokens beside every token's row
    (
        "expansion_whole",
        '"c": _ContextParallelInput(split_dim=1),',
        "",
        ("frame_forcing", "expand_forcing", "broadcast_temb"),
    ),
    # the joined rotary table left whole (what was generated before: each rank's tokens beside
    # every token's rotation), or split on its feature axis
    (
        "joint_table_whole",
        '        "layers.*": {\n            "cos": _ContextParallelInput(split_dim=0),\n'
        '            "sin": _ContextParallelInput(split_dim=0),\n        },\n',
        "",
        ("joint_tokens",),
    ),
    (
        "joint_table_axis_1",
        (
            '"cos": _ContextParallelInput(split_dim=0),',
            '"sin": _ContextParallelInput(split_dim=0),',
        ),
        (
            '"cos": _ContextParallelInput(split_dim=1),',
            '"sin": _ContextParallelInput(split_dim=1),',
        ),
        ("joint_tokens",),
    ),
    # the gather on the last block taking every element of its tuple (the conditioning the
    # blocks hand back is not a token stream: gathered on the token axis it doubles in width),
    # or one gather for a block that returns two values (what was generated before)
    (
        "gather_every_output",
        "            _ContextParallelOutput(gather_dim=1, expected_dims=3),\n            None,\n",
        "            _ContextParallelOutput(gather_dim=1, expected_dims=3),\n"
        "            _ContextParallelOutput(gather_dim=1, expected_dims=3),\n",
        ("handback",),
    ),
    (
        "one_gather",
        "        (\n            _ContextParallelOutput(gather_dim=1, expected_dims=3),\n"
        "            None,\n        ),\n",
        "        _ContextParallelOutput(gather_dim=1, expected_dims=3),\n",
        ("keep_first",),
    ),
    (
        "keys_reversed__ring",
        "zip(parts, counts)",
        "zip(parts[::-1], counts[::-1])",
        ("valid_frames",),
    ),
    # the root split the analysis chose before for a table built by a call handed the stream's
    # length: every rank's forward counts its own tokens from 0 (runs, and is wrong)
    (
        "root_split_table",
        '"blocks.*": {\n            "cos": _ContextParallelInput(split_dim=0),\n'
        '            "sin": _ContextParallelInput(split_dim=0),\n        },\n'
        '        "blocks.0": {',
        '"": {',
        ("fn_table", "method_table"),
    ),
    # the root split the analysis chose before for a variant whose rotary module (built by its
    # base class's `__init__`) counts positions from the tokens it is handed
    (
        "root_split_rope",
        '"blocks.0": {\n            "x": _ContextParallelInput(split_dim=1, expected_dims=3),\n'
        '        },\n        "head": _ContextParallelOutput(gather_dim=1, expected_dims=3),\n'
        '        "rope": {\n'
        "            0: _ContextParallelInput(split_dim=0, split_output=True),\n"
        "            1: _ContextParallelInput(split_dim=0, split_output=True),\n"
        "        },\n",
        '"": {\n            "tokens": _ContextParallelInput(split_dim=1, expected_dims=3),\n'
        '        },\n        "head": _ContextParallelOutput(gather_dim=1, expected_dims=3),\n',
        ("variant_wide",),
    ),
    # the caller's `(cos, sin)` left whole beside this rank's tokens (what a root split of the
    # tokens alone gives)
    (
        "caller_tables_whole",
        '        "blocks.*": {\n            "cos": _ContextParallelInput(split_dim=0),\n'
        '            "sin": _ContextParallelInput(split_dim=0),\n        },\n',
        "",
        ("variant_residual",),
    ),
    # the table left whole where the blocks receive it (what its name left it before): each
    # rank's queries beside every token's rows
    (
        "table_whole",
        '        "blocks.*": {\n            "table": _ContextParallelInput(split_dim=0),\n'
        "        },\n",
        "",
        ("plain_name",),
    ),
    (
        "table_whole",
        '        "blocks.*": {\n            "pe_cache": _ContextParallelInput(split_dim=0),\n'
        "        },\n",
        "",
        ("cut_name",),
    ),
    (
        "table_whole",
        '        "blocks.*": {\n            "even": _ContextParallelInput(split_dim=0),\n'
        '            "odd": _ContextParallelInput(split_dim=0),\n        },\n',
        "",
        ("caller_table",),
    ),
    # the position ids left whole under the root split: every token's rows beside this rank's
    # queries
    (
        "ids_whole",
        '            "position_ids": _ContextParallelInput(\n                split_dim=0,\n'
        "                expected_dims=1,\n            ),\n",
        "",
        ("cut_cache",),
    ),
)


def _selected_cases(request: pytest.FixtureRequest) -> set[str] | None:
    """The cases the session's selected tests need (`-k invented-rope` runs those alone);
    None when a selected test needs them all."""
    wanted: set[str] = set()
    for item in request.session.items:
        if "gloo_run" not in getattr(item, "fixturenames", ()):
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        name = params.get("name", params.get("case"))
        if not isinstance(name, str):
            return None
        wanted.add(name.split("__")[0])
    return wanted


@pytest.fixture(scope="module")
def gloo_run(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> dict[str, Any]:
    """Run every selected case once on 2 gloo ranks; name -> rank 0's output tensor or the error
    text."""
    from lsp_server.analysis import analyze_path

    out = tmp_path_factory.mktemp("cp_gloo")
    plans: dict[str, Any] = {}
    wanted = _selected_cases(request)
    for name, case in cp_cases.CASES.items():
        if wanted is not None and name not in wanted:
            continue
        result = analyze_path(diffusers_file(case.module_file), case.class_name, registry=False)
        if case.generated:
            module = _generated_module(result.to_json(), out / f"{name}_integration.py")
            plans[name] = {"module": str(module)}
            code = module.read_text()
            if RING_MASKS in code or ROUTE in code:  # masked or routed attention: ring too
                plans[f"{name}__ring"] = {"module": str(module), "ring": True}
            if TP_OUTSIDE_CACHE_DIT in code:  # a plain nn.Module: the module's TP planner too
                plans[f"{name}__tp"] = {"module": str(module), "tp": True}
            # the controls: the same module without the mask permutation, without the local
            # attention outside the split list, and with ring steps that keep their own shard's
            # mask columns (cache-dit's behaviour without the module)
            for variant, old, new, only in MUTANTS:
                olds, news = (old, new) if isinstance(old, tuple) else ((old,), (new,))
                if all(o in code for o in olds) and (only is None or name in only):
                    mutant = out / f"{name}_{variant}.py"
                    mutated = code
                    for o, n in zip(olds, news, strict=True):
                        mutated = mutated.replace(o, n)
                    mutant.write_text(mutated)
                    plans[f"{name}__{variant}"] = {"module": str(mutant)}
                    if variant.startswith("ring") or variant.endswith("__ring"):
                        plans[f"{name}__{variant}"]["ring"] = True
                    if variant.endswith("__tp"):
                        plans[f"{name}__{variant}"]["tp"] = True
            continue
        plans[name] = result.transformers[0].context_parallel.to_json()["plan"]
    return run_two_ranks(CP_GLOO / "worker.py", plans, out, WORKER_TIMEOUT_S)


@pytest.mark.parametrize("name", CASES)
def test_inferred_cp_plan_matches_single_process(name: str, gloo_run: dict[str, Any]) -> None:
    baseline = cp_cases.run(name.split("__")[0])
    got = gloo_run[name]
    if isinstance(got, str):
        pytest.fail(f"{name}: CP run failed\n{got[-4000:]}")
    assert got.shape == baseline.shape
    assert baseline.abs().max() > 0.1  # a degenerate output would hide a wrong split
    diff = (got - baseline).abs().max().item()
    print(f"{name}: max abs diff {diff:.3g}")
    assert diff <= TOLERANCE, f"{name}: max abs diff {diff} > {TOLERANCE}"


@pytest.mark.parametrize("name", ["window_forced", "window_forced__ring"])
def test_the_global_twins_cp_plan_on_attention_within_windows_is_wrong(
    name: str, gloo_run: dict[str, Any]
) -> None:
    """Why CP is refused for attention within windows cut inside the attention module
    (window_attn_dit.py, tests/test_token_windows.py): the global-attention twin's generated
    module (right on the twin: `window_global`) runs on the window model and is wrong, as the
    windows are cut from each rank's slice."""
    baseline = cp_cases.run("window_forced")
    got = gloo_run[name]
    assert not isinstance(got, str), got[-2000:]
    assert (got - baseline).abs().max().item() > 1e-2


@pytest.mark.parametrize(
    ("case", "variant"),
    [
        ("duet_mask", "no_reorder"),
        # no ("duet_mask", "no_local"): without the local attention the tail blocks all-to-all
        # a whole sequence, which joins `world` copies of every key, and the module's key masks
        # join as many copies of the mask's columns: the same attention, at `world` times the
        # work. The local attention is what saves that work (and is kept), not what makes it right.
        ("duet_join", "no_reorder"),
        ("duet_mask", "ring_own_shard"),
        ("packed_segment", "ring_own_shard"),
        ("plain_sdpa", "no_route"),
        ("dit", "no_route"),
        ("valid_frames", "keys_reversed"),
        ("valid_frames", "keys_reversed__ring"),
        ("valid_frames", "no_route"),
        ("register_tokens", "no_route"),
        ("inline_rope", "root_split"),
        ("ref_mmdit", "no_route"),
        ("keyword_mmdit", "no_route"),
        ("sequential", "no_route"),
        ("output_dict", "no_route"),
        ("joint_tokens", "joint_table_whole"),
        ("joint_tokens", "joint_table_axis_1"),
        ("handback", "gather_every_output"),
        ("keep_first", "one_gather"),
        ("keyword_mmdit", "later_rope_whole"),
        ("keyword_mmdit", "rope_axis_1"),
        ("free_rope", "rope_axis_1"),
        ("used_rope", "rope_axis_1"),
        ("mirror_grid", "mirror_axis_0"),
        ("index_rope", "rope_axis_1"),
        ("rotate_call", "rope_pair_axis_0"),
        ("sd3", "no_route"),
        ("sit_like", "no_route"),
        ("flash", "flash_unrouted"),
        ("cis", "table_axis_1"),
        ("flash_fallback", "flash_unrouted"),
        ("ref_mmdit", "ids_whole"),
        ("ref_mmdit", "fused_sharded__tp"),
        ("cis", "whole_width_sharded__tp"),
        ("runner", "no_route"),
        ("cis_kw", "table_axis_1"),
        ("timm_flag", "flag_unpinned"),
        ("frame_forcing", "expansion_whole"),
        ("expand_forcing", "expansion_whole"),
        ("broadcast_temb", "expansion_whole"),
        ("table_rope", "rows_axis_1"),
        ("stack_rope", "rows_axis_1"),
        ("seq_first", "batch_axis"),
        ("detr_style", "batch_axis"),
        ("learned_pos", "root_split_cut"),
        ("cut_table", "root_split_cut"),
        ("pooled_cond", "root_split_cut"),
        ("minimax_h3", "adaln_ids_whole"),
        ("packed_rows", "level_ids_whole"),
        ("packed_rows", "gather_after_norm"),
        ("grid_rope", "grid_axis_2"),
        ("grid_rope", "track_axis_2"),
        ("fn_table", "root_split_table"),
        ("method_table", "root_split_table"),
        ("plain_name", "table_whole"),
        ("cut_name", "table_whole"),
        ("caller_table", "table_whole"),
        ("cut_cache", "ids_whole"),
        ("variant_wide", "root_split_rope"),
        ("variant_residual", "caller_tables_whole"),
    ],
)
def test_each_generated_step_is_what_makes_the_invented_joint_mask_models_right(
    gloo_run: dict[str, Any], case: str, variant: str
) -> None:
    """Controls for the invented mask models and the routed SDPA: the generated module without
    the mask permutation, without local attention for the tail blocks after the gather, with
    ring steps that all use this rank's own mask columns, or without the SDPA route (each rank
    attends over its own tokens), runs on the same ranks and is wrong (or stops): the text mask
    is padded and the packed images' mask is block-diagonal, so which key each mask column
    stands for matters, and the tail's attention would all-to-all a whole sequence."""
    baseline = cp_cases.run(case)
    got = gloo_run[f"{case}__{variant}"]
    if isinstance(got, str):
        assert "Error" in got, got[-3000:]  # it stopped: the control failed loudly
        return
    if got.shape != baseline.shape:  # the batch cut instead of the tokens: wrong shape
        print(f"{case} {variant}: shape {tuple(got.shape)} vs {tuple(baseline.shape)}")
        return
    diff = (got - baseline).abs().max().item()
    print(f"{case} {variant}: max abs diff {diff:.3g}")
    assert diff > 100 * TOLERANCE
