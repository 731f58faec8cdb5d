"""``verify --tune``: the grid, the combined stage, the front, the advice — and that it cannot be
fooled.

The pure parts (`cdit_runtime.tune`) are checked on hand-made phase results; the whole run on the
bundled trained model (`skimage-dit`, where caching is about quality) through the real CLI on
CPU, with the generated Flux integration and with a mutant of it that changes the math only when
a cache config is given (the kind of fault a PSNR threshold alone lets through).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import math
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cdit_runtime.cli import add_verify_arguments, build_request
from cdit_runtime.contract import (
    CacheOptions,
    PhaseResult,
    TuneOptions,
    VerificationRequest,
    load_request,
)
from cdit_runtime.tune import (
    cli_line,
    control_donor,
    expand,
    pareto_front,
    report,
    second_stage,
)
from tests.runtime_cli import REPO, assert_documents_valid, db, env, verify


def _request(**tune: object) -> VerificationRequest:
    return load_request(
        {
            "model": {"source": "tiny", "family": "skimage-dit"},
            "integration": {"kind": "standalone", "path": "/x/flux_integration.py"},
            "outputDir": "/tmp/out",
            "tune": tune,
        }
    )


def _phase(name: str, kind: str, latency: float, verdict: str, psnr: float) -> PhaseResult:
    return PhaseResult(
        name=name,
        kind=kind,  # type: ignore[arg-type]
        status="ok",
        latency_s=latency,
        verdict=verdict,  # type: ignore[arg-type]
        psnr_db=psnr,
        ssim=0.99,
    )


# ------------------------------------------------------------------------------------ the grid


def test_stage_one_is_every_backend_eager_and_every_cache_setting() -> None:
    request = _request(
        attentionBackends=["native", "_native_cudnn", "flash"],
        compile=[False, True],
        fn=[1, 2],
        residualDiffThresholds=[0.1, 0.2],
    )
    grid = expand(request, "cuda", 1)
    ids = [p.id for p in grid.phases]
    assert ids[0] == "baseline"
    # native eager is the baseline itself; compile waits for stage 2 (minutes per phase)
    kernels = [p for p in grid.phases if p.kind == "kernels"]
    assert [(p.attention_backend, p.compile) for p in kernels] == [
        (None, False),  # the timing control: the baseline's settings again, as a grid point
        ("_native_cudnn", False),
        ("flash", False),
    ]
    assert kernels[0].id == "kernels-native"
    caches = [p for p in grid.phases if p.kind == "cache"]
    assert len(caches) == 4 and all(p.cache_options is not None for p in caches)
    # one no-cache control per Fn/Bn split; the others borrow it
    controlled = [p.id for p in caches if p.cache_options and p.cache_options.control]
    assert controlled == ["cache-fn1-bn0-rdt0.1-ws8", "cache-fn2-bn0-rdt0.1-ws8"]
    assert control_donor(grid, caches[1]) == "cache-fn1-bn0-rdt0.1-ws8"
    assert control_donor(grid, caches[3]) == "cache-fn2-bn0-rdt0.1-ws8"
    assert len(set(ids)) == len(ids)
    # no parallel phases on one GPU; on several, one of each over every GPU
    assert not any(p.world_size > 1 for p in grid.phases)
    several = expand(request, "cuda", 4)
    assert {p.id for p in several.phases if p.world_size > 1} == {
        "parallel-ulysses-4",
        "parallel-ring-4",
        "parallel-tp-4",
    }


def test_cpu_defaults_use_the_cpu_kernels_and_never_compile() -> None:
    grid = expand(_request(), "cpu", 0)
    kernels = [p for p in grid.phases if p.kind == "kernels"]
    assert [(p.attention_backend, p.compile) for p in kernels] == [
        (None, False),
        ("_native_math", False),
    ]
    assert len([p for p in grid.phases if p.kind == "cache"]) == len(
        TuneOptions().residual_diff_thresholds
    )
    phases = {
        "baseline": _phase("baseline", "baseline", 1.0, "reference", math.inf),
        "cache-fn1-bn0-rdt0.08-ws8": _phase("c", "cache", 0.5, "pass", 40.0),
    }
    assert not any(p.compile for p in second_stage(grid, phases, "cpu"))


def test_stage_two_compiles_the_fastest_passing_backend_and_adds_the_best_cache_settings() -> None:
    request = expand(
        _request(
            attentionBackends=["native", "a", "b"],
            compile=[False, True],
            combine=2,
            residualDiffThresholds=[0.1, 0.2, 0.3],
        ),
        "cuda",
        1,
    )
    phases = {
        "baseline": _phase("baseline", "baseline", 1.0, "reference", math.inf),
        "kernels-a": _phase("kernels-a", "kernels", 0.8, "fail", 20.0),  # fast but wrong
        "kernels-b": _phase("kernels-b", "kernels", 0.9, "pass", 50.0),
        "cache-fn1-bn0-rdt0.1-ws8": _phase("c1", "cache", 0.7, "pass", 40.0),
        "cache-fn1-bn0-rdt0.2-ws8": _phase("c2", "cache", 0.5, "pass", 35.0),
        "cache-fn1-bn0-rdt0.3-ws8": _phase("c3", "cache", 0.3, "warn", 28.0),  # not a pass
    }
    extra = second_stage(request, phases, "cuda")
    assert [
        (
            p.kind,
            p.attention_backend,
            p.compile,
            p.cache_options and p.cache_options.residual_diff_threshold,
        )
        for p in extra
    ] == [
        ("kernels", "b", True, None),
        ("cache", "b", False, 0.2),
        ("cache", "b", True, 0.2),
        ("cache", "b", False, 0.1),
        ("cache", "b", True, 0.1),
    ]
    assert all(not p.cache_options.control for p in extra if p.cache_options)
    combined = dataclasses.replace(request, phases=[*request.phases, *extra])
    donors = {control_donor(combined, p) for p in extra if p.kind == "cache"}
    assert donors == {"cache-fn1-bn0-rdt0.1-ws8"}
    assert len({p.id for p in combined.phases}) == len(combined.phases)
    # no backend beats the baseline: the default kernels are compiled, eager cache points are
    # not repeated (stage 1 measured them)
    phases["kernels-b"] = _phase("kernels-b", "kernels", 1.1, "pass", 50.0)
    again = second_stage(request, phases, "cuda")
    assert [(p.attention_backend, p.compile) for p in again] == [(None, True)] * 3
    assert again[0].id == "kernels-native-compile"
    # compile off: nothing left to combine on the default kernels
    off = expand(_request(attentionBackends=["native"], compile=[False]), "cuda", 1)
    assert second_stage(off, phases, "cuda") == []


def test_the_front_keeps_undominated_passing_points_and_the_advice_is_the_fastest_pass() -> None:
    request = expand(_request(residualDiffThresholds=[0.1, 0.2, 0.3, 0.4]), "cpu", 0)
    phases = {
        "baseline": _phase("baseline", "baseline", 1.0, "reference", math.inf),
        "kernels-_native_math": _phase("k", "kernels", 1.2, "pass", 150.0),  # dominated
        "cache-fn1-bn0-rdt0.1-ws8": _phase("c1", "cache", 0.8, "pass", 40.0),
        "cache-fn1-bn0-rdt0.2-ws8": _phase("c2", "cache", 0.85, "pass", 38.0),  # dominated
        "cache-fn1-bn0-rdt0.3-ws8": _phase("c3", "cache", 0.6, "pass", 33.0),
        "cache-fn1-bn0-rdt0.4-ws8": _phase("c4", "cache", 0.4, "fail", 25.0),  # fastest, fails
    }
    tune = report(request, phases, set(), "float32")
    assert tune.front == ["cache-fn1-bn0-rdt0.3-ws8", "cache-fn1-bn0-rdt0.1-ws8", "baseline"]
    assert tune.recommended == "cache-fn1-bn0-rdt0.3-ws8"
    assert {p.phase for p in tune.points if p.on_front} == set(tune.front)
    assert any("cache-fn1-bn0-rdt0.4-ws8" in note for note in tune.notes)
    # the snippet is Python with the recommended settings; the CLI line verifies exactly them
    tree = ast.parse(tune.python)
    keywords = {k.arg: k.value for k in ast.walk(tree) if isinstance(k, ast.keyword)}
    assert ast.literal_eval(keywords["residual_diff_threshold"]) == 0.3
    assert "from flux_integration import enable" in tune.python
    again = _parse_cli(tune.cli)
    spec = next(p for p in request.phases if p.id == tune.recommended)
    assert [p.kind for p in again.phases] == ["baseline", "cache"]
    assert again.cache.residual_diff_threshold == 0.3
    assert again.cache.fn == spec.cache_options.fn and again.integration == request.integration
    # nothing passes faster than the baseline: no advice, said so
    for name in list(phases)[2:]:
        phases[name] = _phase(name, "cache", 1.5, "pass", 40.0)
    slow = report(request, phases, set())
    assert slow.recommended is None and slow.python == ""
    assert any("keep the defaults" in note for note in slow.notes)


def test_pareto_front_of_equal_points_keeps_both() -> None:
    request = expand(_request(residualDiffThresholds=[0.1, 0.2]), "cpu", 0)
    phases = {
        "baseline": _phase("baseline", "baseline", 1.0, "reference", math.inf),
        "cache-fn1-bn0-rdt0.1-ws8": _phase("c1", "cache", 0.5, "pass", 40.0),
        "cache-fn1-bn0-rdt0.2-ws8": _phase("c2", "cache", 0.5, "pass", 40.0),
    }
    tune = report(request, phases, set())
    assert pareto_front(tune.points, phases)[:2] == [
        "cache-fn1-bn0-rdt0.1-ws8",
        "cache-fn1-bn0-rdt0.2-ws8",
    ]


def _parse_cli(line: str) -> VerificationRequest:
    argv = shlex.split(line)
    assert argv[:2] == ["cdit-integrate", "verify"]
    parser = argparse.ArgumentParser()
    add_verify_arguments(parser)
    args = parser.parse_args([*argv[2:], "--out", "/tmp/x"])
    return load_request(build_request(args))


def test_cli_line_of_a_parallel_point_with_cache_and_kernels() -> None:
    request = _request()
    spec = dataclasses.replace(
        expand(request, "cuda", 2).phases[-1],
        cache=True,
        cache_options=CacheOptions(fn=2, residual_diff_threshold=0.25),
        attention_backend="_native_cudnn",
        compile=True,
    )
    again = _parse_cli(cli_line(request, spec))
    (phase,) = [p for p in again.phases if p.kind != "baseline"]
    assert (phase.kind, phase.size, phase.cache) == (spec.kind, 2, True)
    assert again.attention_backend == "_native_cudnn" and again.compile is True
    assert (again.cache.fn, again.cache.residual_diff_threshold) == (2, 0.25)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tune-rdt", "0.1"], "--tune-rdt needs --tune"),
        (["--tune", "--tune-rdt", "x"], "--tune-rdt 'x': expected a comma list of floats"),
        (["--tune", "--tune-budget", "0"], "tune.budgetS must be a finite number of seconds > 0"),
        (["--tune", "--tune-rdt", "-1"], "tune.residualDiffThresholds[0] must be >= 0"),
        (["--tune", "--phases", "baseline,cache"], "--tune chooses the phases itself"),
    ],
)
def test_bad_tune_flags_get_one_line(flags: list[str], message: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cdit_runtime",
            "verify",
            "--tiny",
            "skimage-dit",
            *flags,
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env(),
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------------- a real tune on CPU

pytest.importorskip("torch")
pytest.importorskip("cache_dit")


@pytest.fixture(scope="module")
def integration(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generated Flux standalone module (`make demo`'s answers, target moved here)."""
    folder = tmp_path_factory.mktemp("tune")
    answers = json.loads((REPO / "examples/demo/flux_answers.json").read_text())
    answers["target"]["path"] = str(folder / "flux_integration.py")
    (folder / "answers.json").write_text(json.dumps(answers))
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from lsp_server.cli import main; sys.exit(main())",
            "generate",
            str(folder / "answers.json"),
            "--manifest",
            str(folder / "generated.json"),
        ],
        capture_output=True,
        text=True,
        cwd=folder,
        env=env(),
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return folder / "flux_integration.py"


GRID = ["--tune", "--tune-attn", "native,_native_math", "--tune-rdt", "0.08,0.3", "--ws", "4"]


def test_tune_on_the_trained_model_recommends_a_passing_cache_setting(
    integration: Path, tmp_path: Path
) -> None:
    run = verify(
        tmp_path, "--tiny", "skimage-dit", "--integration", str(integration), *GRID, timeout=900
    )
    assert run.code == 0, run.stderr
    assert_documents_valid(run)
    tune = run.result["tune"]
    points = {p["phase"]: p for p in tune["points"]}
    assert set(points) == {
        "baseline",
        "kernels-native",
        "kernels-_native_math",
        "cache-fn1-bn0-rdt0.08-ws4",
        "cache-fn1-bn0-rdt0.3-ws4",
    } | {p for p in points if points[p]["stage"] == 2}
    # another SDPA kernel: the same math, judged near-exact in float32
    assert points["kernels-_native_math"]["verdict"] == "pass"
    # the timing control runs the baseline's own kernels: bit-identical
    assert points["kernels-native"]["verdict"] == "pass"
    assert points["kernels-native"]["psnrDb"] == "inf"
    assert db(points["kernels-_native_math"]["psnrDb"]) > 80
    # the trained model really caches, and the control of the split backs both thresholds
    low, high = points["cache-fn1-bn0-rdt0.08-ws4"], points["cache-fn1-bn0-rdt0.3-ws4"]
    assert 0 < low["cachedSteps"] < high["cachedSteps"]
    assert run.phase("cache-fn1-bn0-rdt0.08-ws4")["control"]["verdict"] == "pass"
    assert run.phase("cache-fn1-bn0-rdt0.3-ws4")["control"] is None
    assert all(points[p]["verdict"] in ("pass", "reference") for p in tune["front"])
    reference = min(points["baseline"]["latencyS"], points["kernels-native"]["latencyS"])
    if tune["recommended"] is None:
        # Latencies on a loaded machine: no passing point beat the baseline this time. The
        # report must then say so and recommend nothing (timings decide, not this test).
        faster = [
            p for p in points.values() if p["verdict"] == "pass" and p["latencyS"] < reference
        ]
        assert not faster, faster
        assert any("beat the baseline" in note for note in tune["notes"])
        return
    recommended = points[tune["recommended"]]
    assert recommended["verdict"] == "pass" and recommended["onFront"]
    assert recommended["latencyS"] == min(
        p["latencyS"] for p in points.values() if p["verdict"] == "pass"
    )
    assert recommended["latencyS"] < reference
    assert recommended["speedup"] == pytest.approx(reference / recommended["latencyS"])
    ast.parse(tune["python"])
    assert tune["cli"].startswith("cdit-integrate verify --tiny skimage-dit --integration ")
    assert "Recommended: " in run.stderr


def test_tune_is_not_fooled_by_an_integration_that_changes_the_math(
    integration: Path, tmp_path: Path
) -> None:
    """A mutant that scales one weight by 1.01 whenever a cache config is given: each cached
    image stays within the cache PSNR bar, so only the no-cache control can tell — and it must,
    for every cache point, also those that borrow it."""
    source = integration.read_text()
    anchor = "    return cache_dit.enable_cache(\n        adapter,"
    assert anchor in source
    mutant = integration.with_name("flux_mutant.py")
    mutant.write_text(
        source.replace(
            anchor,
            "    if cache_config is not None:\n"
            "        import torch\n\n"
            "        with torch.no_grad():\n"
            "            next(model.parameters()).mul_(1.01)\n" + anchor,
        )
    )
    run = verify(
        tmp_path, "--tiny", "skimage-dit", "--integration", str(mutant), *GRID, timeout=900
    )
    assert run.code == 0, run.stderr
    points = {p["phase"]: p for p in run.result["tune"]["points"]}
    caches = [p for p in points.values() if p["cache"] is not None]
    assert caches and all(p["verdict"] == "fail" for p in caches)
    # the cached image alone would have passed: the control is what failed it
    assert max(db(p["psnrDb"]) for p in caches) > 30
    assert "no-cache control" in run.phase("cache-fn1-bn0-rdt0.3-ws4")["verdictReason"]
    recommended = run.result["tune"]["recommended"]
    assert recommended is None or points[recommended]["cache"] is None


def test_a_point_must_beat_the_timing_control_too() -> None:
    """The first phase after a load can be slow for reasons that are not its kernels: the
    baseline's settings are measured again as a grid point, and a point must beat the faster."""
    request = expand(_request(residualDiffThresholds=[0.1]), "cpu", 0)
    phases = {
        "baseline": _phase("baseline", "baseline", 1.5, "reference", math.inf),
        "kernels-native": _phase("kernels-native", "kernels", 1.0, "pass", math.inf),
        "kernels-_native_math": _phase("k", "kernels", 1.2, "pass", 150.0),
        "cache-fn1-bn0-rdt0.1-ws8": _phase("c1", "cache", 0.8, "pass", 40.0),
    }
    assert second_stage(request, phases, "cpu") == []  # 1.2 s beats 1.5 s but not 1.0 s
    tune = report(request, phases, set())
    assert tune.recommended == "cache-fn1-bn0-rdt0.1-ws8"
    point = next(p for p in tune.points if p.phase == tune.recommended)
    assert point.speedup == pytest.approx(1.0 / 0.8)
    assert any("50% apart" in note for note in tune.notes)
    phases["cache-fn1-bn0-rdt0.1-ws8"] = _phase("c1", "cache", 1.1, "pass", 40.0)
    assert report(request, phases, set()).recommended is None
