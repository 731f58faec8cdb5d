"""The verifier, tested by mutation: deliberately broken integrations must not pass.

For three tiny random-weight pipelines (Flux: two block lists cached as one, root split; Wan:
video, separate CFG, block-level split with a RoPE output split; QwenImage: separate CFG,
position-embedding output split) the integration is *generated* (analyze -> plan -> standalone
module). Each mutant is that module with one deliberate fault of a kind users make (`MUTANTS`:
wrong split axis, missing gather, an input split that must not be, an input left whole that must
be split, wrong ForwardPattern, wrong ``has_separate_cfg``, TP rowwise/colwise swapped, a dropped
output layout, missing ``shard_div_attr``, missing weight regrouping), verified in one runtime
request per model (phases may name their own integration module, so one launch and one model load
serve every mutant). The correct module's phases must pass (no false alarm) and every mutant must be
killed: a verdict other than pass, or a phase that failed.

Mutants that cannot change the result are left out, with the reason in
``docs/verification-thresholds.md`` (e.g. ``has_separate_cfg=False`` for Wan or QwenImage:
cache-dit forces separate CFG for pipelines whose class name starts with those prefixes; no
``shard_div_attr`` on Flux heads: its processor absorbs the head count with ``-1``). The score
is printed and recorded in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")
pytest.importorskip("cache_dit")

from lsp_server.analysis import analyze_path
from lsp_server.codegen import build_plan, generate, parse_plan, write

sys.path.insert(0, str(Path(__file__).resolve().parent / "runtime_fixtures"))
from build_tiny_dit import build as build_tiny_dit
from runtime_cli import env

REPO = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S = 900
TARGET_KILL_RATE = 0.95


@dataclass(frozen=True)
class Model:
    """A pipeline the mutants run on: its sources and how the request loads and calls it.

    ``quality_judged``: the cache phase's PSNR verdict means something here. On random weights
    DiT's residuals change too much between steps for a cached step to stay close (the correct
    integration's cache phase reads ~21 dB), so its mutants must be caught by the no-cache
    control or fail outright.
    """

    module: str
    class_name: str
    pipeline: str
    phases: tuple[str, ...] = ("cache", "ulysses", "tp")
    request: dict[str, Any] = field(default_factory=dict)
    quality_judged: bool = True


_T = "diffusers.models.transformers."
_P = "diffusers.pipelines."
MODELS = {
    "flux": Model(_T + "transformer_flux", "FluxTransformer2DModel", _P + "flux.pipeline_flux"),
    "wan": Model(_T + "transformer_wan", "WanTransformer3DModel", _P + "wan.pipeline_wan"),
    # True CFG (two transformer calls per step) runs only with a negative prompt; the generated
    # integration declares has_separate_cfg=True, so the run gives one (without it the no-cache
    # control rightly fails: cache-dit would count one step per two calls).
    "qwenimage": Model(
        _T + "transformer_qwenimage",
        "QwenImageTransformer2DModel",
        _P + "qwenimage.pipeline_qwenimage",
        request={"negativePrompt": "blurry, dark"},
    ),
    # Post-loop read of self.transformer_blocks[0]: the integration carries a PatchFunctor.
    # CP is left out (its processor calls SDPA directly and needs a processor patch).
    "dit": Model(
        _T + "dit_transformer_2d",
        "DiTTransformer2DModel",
        _P + "dit.pipeline_dit",
        phases=("cache",),
        request={"extraCallKwargs": {"class_labels": [1]}, "steps": 8},
        quality_judged=False,
    ),
}


@dataclass(frozen=True)
class Mutant:
    """One fault: ``pattern`` (regex over the generated module) -> ``repl``, ``count`` matches."""

    model: str
    name: str
    fault: str
    phase: str  # the phase kind that exercises it
    pattern: str
    repl: str
    count: int = 1


def _split(name: str, dim: int) -> str:
    """Regex of a `_ContextParallelInput` entry for ``name`` with ``split_dim=dim``."""
    return rf"({name}: _ContextParallelInput\(\s*split_dim=){dim}"


def _entry(name: str) -> str:
    """Regex of a whole `name: _ContextParallel…(…),` entry (one level of nesting)."""
    return rf"\s*{name}: _ContextParallel\w+\([^()]*\),"


def _dict_entry(name: str) -> str:
    """Regex of a whole `name: { … },` entry whose values are `_ContextParallel…(…)` calls."""
    return rf"\s*{name}: \{{(?:[^{{}}()]|\([^()]*\))*\}},"


MUTANTS = [
    # ---- Flux: root split of both streams and both position-id tensors; gather at proj_out.
    Mutant("flux", "split-hidden-wrong-axis", "wrong split axis", "ulysses",
           _split('"hidden_states"', 1), r"\g<1>2"),
    Mutant("flux", "split-img-ids-wrong-axis", "wrong split axis", "ulysses",
           _split('"img_ids"', 0), r"\g<1>1"),
    Mutant("flux", "txt-ids-not-split", "input left whole", "ulysses", _entry('"txt_ids"'), ""),
    Mutant("flux", "img-ids-not-split", "input left whole", "ulysses", _entry('"img_ids"'), ""),
    Mutant("flux", "text-not-split", "input left whole", "ulysses",
           _entry('"encoder_hidden_states"'), ""),
    Mutant("flux", "no-gather", "missing gather", "ulysses", _entry('"proj_out"'), ""),
    Mutant("flux", "gather-wrong-axis", "wrong gather axis", "ulysses",
           r"(\"proj_out\": _ContextParallelOutput\(\s*gather_dim=)1", r"\g<1>2"),
    Mutant("flux", "split-timestep", "input split that must not be", "ulysses",
           r'(\n(\s*)"hidden_states": _ContextParallelInput)',
           r'\n\2"timestep": _ContextParallelInput(split_dim=0, expected_dims=1),\1'),
    Mutant("flux", "joined-blocks-pattern-0", "wrong ForwardPattern", "cache",
           r"(forward_pattern=ForwardPattern\.)Pattern_1", r"\g<1>Pattern_0"),
    Mutant("flux", "joined-lists-single-blocks-run-twice", "lists joined, second not emptied",
           "cache", r"\n\s*dummy_blocks_names=\[\"single_transformer_blocks\"\],", ""),
    Mutant("flux", "separate-cfg-true", "wrong has_separate_cfg", "cache",
           r"has_separate_cfg=False", "has_separate_cfg=True"),
    Mutant("flux", "tp-q-rowwise", "TP colwise/rowwise swapped", "tp",
           r'("attn\.to_q": )ColwiseParallel\(\)', r"\g<1>RowwiseParallel()", count=2),
    Mutant("flux", "tp-ff-down-colwise", "TP colwise/rowwise swapped", "tp",
           r'("ff\.net\.2": )RowwiseParallel\(\)', r"\g<1>ColwiseParallel()"),
    Mutant("flux", "tp-modulation-sharded", "TP output layout dropped", "tp",
           r'("norm1\.linear": ColwiseParallel\()output_layouts=Replicate\(\)', r"\g<1>"),
    Mutant("flux", "tp-no-regroup", "missing weight regrouping", "tp",
           r"\n\s*_regroup\(\s*block\.proj_out,(?:[^()]|\([^()]*\)|\[[^\]]*\])*\)", ""),
    # the planner returns before sharding anything: every rank computes the whole model, the
    # output equals the baseline bit for bit (was a "pass"; the phase is not_exercised now)
    Mutant("flux", "tp-nothing-sharded", "a plan that parallelizes nothing", "tp",
           r"(\n(\s*)tp_size = tp_mesh\.size\(\))", r"\g<1>\n\g<2>return transformer, []"),
    # ---- Wan: separate CFG; split at blocks.0, RoPE split at its output, gather at proj_out.
    Mutant("wan", "pattern-0", "wrong ForwardPattern", "cache",
           r"(forward_pattern=ForwardPattern\.)Pattern_2", r"\g<1>Pattern_0"),
    Mutant("wan", "rope-not-split", "input left whole", "ulysses", _dict_entry('"rope"'), ""),
    Mutant("wan", "rope-wrong-axis", "wrong split axis", "ulysses",
           r"(split_dim=)1(,\s*expected_dims=4,\s*split_output=True)", r"\g<1>2\2", count=2),
    Mutant("wan", "split-hidden-wrong-axis", "wrong split axis", "ulysses",
           _split('"hidden_states"', 1), r"\g<1>2"),
    Mutant("wan", "no-gather", "missing gather", "ulysses", _entry('"proj_out"'), ""),
    Mutant("wan", "split-text", "input split that must not be", "ulysses",
           r'(\n(\s*)"hidden_states": _ContextParallelInput)',
           r'\n\2"encoder_hidden_states": _ContextParallelInput(split_dim=1, expected_dims=3),\1'),
    Mutant("wan", "split-late", "split point after the first block", "ulysses",
           r'"blocks\.0"', '"blocks.1"'),
    Mutant("wan", "tp-out-colwise", "TP colwise/rowwise swapped", "tp",
           r'("attn2\.to_out\.0": )RowwiseParallel\(\)', r"\g<1>ColwiseParallel()"),
    Mutant("wan", "tp-no-shard-div-attr", "missing shard_div_attr", "tp",
           r"\n\s*shard_div_attr\(block\.attn1, \"heads\", tp_size\)", ""),
    # ---- QwenImage: separate CFG; split both streams at the first block, pos_embed output split.
    Mutant("qwenimage", "split-late", "split point after the first block", "ulysses",
           r'"transformer_blocks\.0"', '"transformer_blocks.1"'),
    Mutant("qwenimage", "tp-img-mlp-down-colwise", "TP colwise/rowwise swapped", "tp",
           r'("img_mlp\.net\.2": )RowwiseParallel\(\)', r"\g<1>ColwiseParallel()"),
    Mutant("qwenimage", "pattern-0", "wrong ForwardPattern", "cache",
           r"(forward_pattern=ForwardPattern\.)Pattern_1", r"\g<1>Pattern_0"),
    Mutant("qwenimage", "pos-embed-not-split", "input left whole", "ulysses",
           _dict_entry('"pos_embed"'), ""),
    Mutant("qwenimage", "pos-embed-wrong-axis", "wrong split axis", "ulysses",
           r"(split_dim=)0(,\s*expected_dims=2,\s*split_output=True)", r"\g<1>1\2", count=2),
    Mutant("qwenimage", "no-gather", "missing gather", "ulysses", _entry('"proj_out"'), ""),
    Mutant("qwenimage", "gather-wrong-axis", "wrong gather axis", "ulysses",
           r"(\"proj_out\": _ContextParallelOutput\(\s*gather_dim=)1", r"\g<1>2"),
    Mutant("qwenimage", "text-not-split", "input left whole", "ulysses",
           _entry('"encoder_hidden_states"'), ""),
    Mutant("qwenimage", "split-hidden-wrong-axis", "wrong split axis", "ulysses",
           _split('"hidden_states"', 1), r"\g<1>2"),
    # ---- DiT: PatchFunctor for the post-loop read of the first block; batched CFG.
    Mutant("dit", "functor-dropped", "dropped PatchFunctor", "cache",
           r"\n\s*patch_functor=\w+\(\),", ""),
    Mutant("dit", "functor-wrong-block", "wrong PatchFunctor work", "cache",
           r'(self\._cdit_blocks\["transformer_blocks"\]\[)0\]', r"\g<1>-1]"),
    Mutant("dit", "functor-not-installed", "dropped PatchFunctor", "cache",
           r"\n\s*transformer\.forward = _patched_forward\.__get__\(transformer\)", ""),
    Mutant("dit", "separate-cfg-true", "wrong has_separate_cfg", "cache",
           r"has_separate_cfg=False", "has_separate_cfg=True"),
    Mutant("dit", "pattern-2", "wrong ForwardPattern", "cache",
           r"(forward_pattern=ForwardPattern\.)Pattern_3", r"\g<1>Pattern_2"),
]  # fmt: skip


def _generate(model: str, out: Path) -> Path:
    spec = MODELS[model]
    analysis = analyze_path(spec.module, spec.class_name, spec.pipeline, registry=False)
    target = out / f"{model}_integration.py"
    plan, errors = parse_plan(
        build_plan(analysis.to_json(), {"target": {"kind": "standalone", "path": str(target)}})
    )
    assert plan is not None, errors
    result = generate(plan, manifest_path=out / ".cdit" / "generated.json")
    assert result.ok, result.to_json()
    write(result)
    return target


def mutate(source: str, mutant: Mutant) -> str:
    """Apply one mutant; fails loudly when the generated code no longer has its target."""
    mutated, found = re.subn(mutant.pattern, mutant.repl, source)
    assert found == mutant.count, (
        f"{mutant.model}/{mutant.name}: pattern matched {found} times, expected {mutant.count}"
    )
    assert mutated != source
    return mutated


def _verify(model: str, out: Path) -> dict[str, Any]:
    """Two requests: the correct module (cache, ulysses, tp), then every mutant of ``model``.

    Apart, so that the correct module's phases never share a launch with mutants: a mutant that
    fails inside a collective can leave a gloo launch in a state where a later phase of the same
    launch crashes (seen once: SIGSEGV in rank 1), which must not read as a false alarm."""
    out.mkdir(parents=True, exist_ok=True)
    correct = _generate(model, out)
    source = correct.read_text()
    spec = MODELS[model]
    phases: list[dict[str, Any]] = [{"kind": "baseline"}, *({"kind": k} for k in spec.phases)]
    mutants: list[dict[str, Any]] = [{"kind": "baseline"}]
    for mutant in (m for m in MUTANTS if m.model == model):
        path = out / "mutants" / f"{mutant.name}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(mutate(source, mutant))
        mutants.append(
            {"kind": mutant.phase, "name": f"mutant-{mutant.name}", "integration": str(path)}
        )
    if model == "dit":
        model_source = {"source": "local", "path": str(build_tiny_dit(out / "model-dit"))}
    else:
        model_source = {"source": "tiny", "family": model}
    merged: dict[str, Any] = {}
    for label, these in (("correct", phases), ("mutants", mutants)):
        request = {
            "model": model_source,
            "outputDir": str(out / label),
            "integration": {"kind": "standalone", "path": str(correct)},
            "phases": these,
            "cache": {"maxWarmupSteps": 1, "calibrateShare": 0.5},
            "device": "cpu",
            "timeoutS": 300,
            **spec.request,
        }
        if model_source["source"] == "tiny":
            request["model"] = {**model_source, "path": str(out / f"model-{model}")}
        request_path = out / f"{label}.json"
        request_path.write_text(json.dumps(request, indent=1))
        proc = subprocess.run(
            [sys.executable, "-m", "cdit_runtime", "verify", str(request_path), "--quiet"],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            cwd=REPO,
            env=env(),
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = json.loads((out / label / "results.json").read_text())
        if not merged:
            merged = result
        else:
            merged["phases"] += [p for p in result["phases"] if p["name"] != "baseline"]
    return merged


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    base = tmp_path_factory.mktemp("mutations")
    return {model: _verify(model, base / model) for model in MODELS}


def _phases(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in result["phases"]}


def _ran(phase: dict[str, Any]) -> bool:
    """False for phases this host refused upfront (e.g. TP without an accelerator)."""
    return phase["status"] != "skipped"


@pytest.mark.parametrize("model", list(MODELS))
def test_correct_integration_passes(results: dict[str, dict[str, Any]], model: str) -> None:
    spec = MODELS[model]
    phases = _phases(results[model])
    for kind in spec.phases:
        name = kind if kind == "cache" else f"{kind}-2"
        phase = phases[name]
        if not _ran(phase):
            continue
        assert phase["status"] == "ok", (name, phase["error"])
        if kind == "cache" and not spec.quality_judged:
            continue
        assert phase["verdict"] == "pass", (name, phase["verdictReason"])
    cache = phases["cache"]
    assert cache["control"]["verdict"] == "pass", cache["control"]
    assert cache["cachedSteps"] >= 1, cache["calibration"]


def _killed(mutant: Mutant, phase: dict[str, Any]) -> bool:
    if phase["status"] != "ok":
        return True
    control = phase.get("control") or {}
    if control.get("verdict") == "fail":
        return True
    # Where the cache phase's PSNR means nothing (see `Model.quality_judged`), only a failed
    # phase or a failed control counts.
    return MODELS[mutant.model].quality_judged and phase["verdict"] != "pass"


def test_mutants_are_killed(results: dict[str, dict[str, Any]]) -> None:
    rows = []
    killed = ran = 0
    survivors = []
    for mutant in MUTANTS:
        phase = _phases(results[mutant.model])[f"mutant-{mutant.name}"]
        if not _ran(phase):
            rows.append((mutant, "not run", phase["error"]["code"]))
            continue
        ran += 1
        dead = _killed(mutant, phase)
        killed += dead
        how = phase["verdict"] if phase["status"] == "ok" else f"{phase['status']}"
        reason = phase["verdictReason"] if phase["status"] == "ok" else phase["error"]["message"]
        rows.append((mutant, how, reason))
        if not dead:
            survivors.append(f"{mutant.model}/{mutant.name}: {reason}")
    for mutant, how, reason in rows:
        print(f"{mutant.model:10} {mutant.name:26} {mutant.fault:32} {how:14} {reason[:90]}")
    print(f"killed {killed} of {ran} mutants that ran ({len(MUTANTS) - ran} not run here)")
    assert ran >= 30
    assert killed / ran >= TARGET_KILL_RATE, survivors
    assert not survivors, survivors
