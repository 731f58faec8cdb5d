"""Faults injected into verification runs: nothing is left behind, every fault is named right.

Process trees (the launcher, no torch): what a rank starts ends with the rank on a normal end;
a controller killed with SIGKILL takes every rank's tree with it, also while it is forking ranks
(10 trials at random moments); a child forked just before its parent died exits instead of
running orphaned. Real runs (tiny Flux on CPU, `runtime_fixtures/fault_standalone.py`): a helper
process an integration starts does not outlive a successful run; a rank killed with SIGKILL is
reported as that rank; a cancel that signals every process of the tree while the workers import
is "cancelled"; NaN outputs fail as non-finite, never as PSNR inf / "bit-identical".
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_cli import Run, env, verify

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "runtime_fixtures"
FAULTS = FIXTURES / "fault_standalone.py"
RUN_TIMEOUT_S = 240
# A rank that starts a helper and then waits: the helper's command line carries the marker.
RANK_CODE = (
    "import subprocess, sys, time; subprocess.Popen(['sleep', sys.argv[1]]); time.sleep(300)"
)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper has ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _matching(marker: str) -> list[int]:
    """Live processes whose command line contains ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and _alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def _left_after(marker: str, within_s: float = 5.0) -> list[int]:
    """Processes with ``marker`` still alive after ``within_s`` (killed then, by pid)."""
    deadline = time.time() + within_s
    left = _matching(marker)
    while left and time.time() < deadline:
        time.sleep(0.05)
        left = _matching(marker)
    for pid in left:  # do not leave them to the next test
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left


def _marker() -> str:
    return f"{300 + random.randrange(100)}.{os.getpid()}{random.randrange(10**8):08d}"


@pytest.fixture
def linux() -> Iterator[None]:
    if not sys.platform.startswith("linux"):
        pytest.skip("death signals and /proc are Linux")
    yield


# --------------------------------------------------------------------------- the launcher alone


def test_a_normal_end_kills_what_each_rank_started(tmp_path: Path, linux: None) -> None:
    from cdit_runtime.launcher import start_launch

    marker = _marker()
    code = "import subprocess, sys; subprocess.Popen(['sleep', sys.argv[1]])"  # then exit 0
    launch = start_launch(
        "normal", tmp_path / "spec.json", 3, tmp_path, dict(os.environ),
        [sys.executable, "-c", code, marker],
    )  # fmt: skip
    deadline = time.time() + 60
    while launch.alive() and time.time() < deadline:
        time.sleep(0.05)
    launch.close()
    assert [r.exit_code for r in launch.ranks] == [0, 0, 0]
    assert _left_after(marker, within_s=2.0) == []


def test_a_rank_reports_its_workers_own_exit_status(tmp_path: Path, linux: None) -> None:
    from cdit_runtime.launcher import start_launch

    code = (
        "import os, signal, sys; rank = int(os.environ['RANK']); "
        "os.kill(os.getpid(), signal.SIGKILL) if rank == 0 else sys.exit(3)"
    )
    launch = start_launch(
        "codes", tmp_path / "spec.json", 2, tmp_path, dict(os.environ), [sys.executable, "-c", code]
    )
    deadline = time.time() + 60
    while launch.alive() and time.time() < deadline:
        time.sleep(0.05)
    launch.close()
    assert [r.exit_code for r in launch.ranks] == [-signal.SIGKILL, 3]


def _spawn_controller(tmp_path: Path, world: int, marker: str) -> subprocess.Popen[str]:
    """`runtime_fixtures/spawn_ranks.py`: a controller starting ``world`` ranks of RANK_CODE."""
    process = subprocess.Popen(
        [
            sys.executable, str(FIXTURES / "spawn_ranks.py"), str(world), str(tmp_path),
            sys.executable, "-c", RANK_CODE, marker,
        ],
        stdout=subprocess.PIPE, text=True, env=env(),
    )  # fmt: skip
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "spawning"
    return process


def test_a_killed_controller_takes_every_rank_and_its_children(tmp_path: Path, linux: None) -> None:
    marker = _marker()
    controller = _spawn_controller(tmp_path, 3, marker)
    assert controller.stdout is not None
    assert controller.stdout.readline().strip() == "spawned"
    deadline = time.time() + 60
    while len(_matching(f"sleep {marker}")) < 3 and time.time() < deadline:
        time.sleep(0.05)  # every rank has started its helper
    assert len(_matching(f"sleep {marker}")) == 3
    controller.kill()
    controller.wait()
    assert _left_after(marker) == []


def test_a_controller_killed_while_forking_ranks_leaves_no_orphan(
    tmp_path: Path, linux: None
) -> None:
    """10 trials: SIGKILL at a random moment while 8 ranks (each starting a helper) are forked."""
    orphaned = []
    started = time.time()
    for trial in range(10):
        marker = _marker()
        controller = _spawn_controller(tmp_path / str(trial), 8, marker)
        time.sleep(random.uniform(0.0, 0.25))
        controller.kill()
        controller.wait()
        left = _left_after(marker)
        if left:
            orphaned.append((trial, len(left)))
    assert orphaned == []
    assert time.time() - started < 120


def test_a_child_forked_just_before_its_parent_died_exits(tmp_path: Path, linux: None) -> None:
    """The death signal is armed after the fork; a parent killed in between is caught by the
    re-check of the parent (here the window is widened to 1 s by the parent's own hook)."""
    marker = _marker()
    code = (
        "import os, subprocess, sys, time\n"
        "from cdit_runtime.guard import parent_watch\n"
        "watch = parent_watch(os.getpid())\n"
        "def slow():\n"
        "    time.sleep(1.0)\n"
        "    watch()\n"
        "print('forking', flush=True)\n"
        "subprocess.Popen(['sleep', sys.argv[1]], preexec_fn=slow)\n"
        "time.sleep(300)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code, marker], stdout=subprocess.PIPE, text=True, env=env()
    )
    assert parent.stdout is not None and parent.stdout.readline().strip() == "forking"
    time.sleep(0.3)  # the child sleeps in its preexec hook, its death signal not yet armed
    parent.kill()
    parent.wait()
    time.sleep(1.5)  # the hook has run: without the re-check, `sleep` would now run orphaned
    assert _left_after(marker) == []


# ---------------------------------------------------------------------------------- real runs


def _fault_run(out: Path, fault: str, *args: str) -> Run:
    os.environ["CDIT_FAULT"] = fault
    os.environ["CDIT_FAULT_DIR"] = str(out.parent)
    try:
        return verify(
            out, "--tiny", "flux", "--integration", str(FAULTS), *args, timeout=RUN_TIMEOUT_S
        )
    finally:
        del os.environ["CDIT_FAULT"], os.environ["CDIT_FAULT_DIR"]


@pytest.fixture
def runtime() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("diffusers")
    pytest.importorskip("cache_dit")


def test_a_helper_an_integration_starts_ends_with_a_successful_run(
    tmp_path: Path, runtime: None, linux: None
) -> None:
    run = _fault_run(tmp_path / "out", "spawn-child", "--phases", "baseline", "--steps", "2")
    assert run.code == 0, run.stderr
    assert run.phase("baseline")["status"] == "ok"
    pid = int((tmp_path / "child.rank0.pid").read_text())
    deadline = time.time() + 2.0
    while _alive(pid) and time.time() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the integration's helper process outlived the run")


def test_a_killed_rank_1_is_reported_as_rank_1(tmp_path: Path, runtime: None) -> None:
    run = _fault_run(tmp_path / "out", "kill-rank1", "--phases", "baseline,ulysses", "--steps", "2")
    assert run.code == 0, run.stderr  # the baseline ran
    assert run.phase("baseline")["status"] == "ok"
    assert run.phase("baseline")["error"] is None
    phase = run.phase("ulysses-2")
    assert phase["status"] == "failed"
    assert phase["error"]["code"] == "WORKER_DIED"
    assert phase["error"]["message"].startswith("rank 1 ended with signal 9 (SIGKILL)")
    assert "launch1.rank1.log" in phase["error"]["message"]


def test_nan_output_is_a_non_finite_failure_not_bit_identical(
    tmp_path: Path, runtime: None
) -> None:
    run = _fault_run(
        tmp_path / "out", "nan", "--phases", "baseline,cache", "--steps", "3", "--no-control"
    )
    assert run.code == 0, run.stderr
    cache = run.phase("cache")
    assert cache["verdict"] == "fail"
    reason = cache["verdictReason"]
    assert reason.startswith("non-finite values:"), reason
    assert "its output 12288 NaN of 12288 values" in reason
    assert "its final latents" in reason  # both are checked
    assert cache["psnrDb"] is None and cache["latentPsnrDb"] is None
    assert not any("bit-identical" in note for note in cache["notes"])
    finished = [e for e in run.events if e["event"] == "phase_finished" and e["phase"] == "cache"]
    assert finished[-1]["verdict"] == "fail"


def test_a_cancel_that_signals_every_process_while_workers_import_is_cancelled(
    tmp_path: Path, runtime: None, linux: None
) -> None:
    """As scancel or a service manager do: SIGTERM to every process of the tree, the workers
    first (the controller's own signal follows 0.3 s later)."""
    from lsp_server.features.process_tree import descendants

    controller = subprocess.Popen(
        [
            sys.executable, "-m", "cdit_runtime", "verify", "--tiny", "flux",
            "--phases", "baseline,cache,ulysses", "--quiet", "--out", str(tmp_path),
        ],
        stdout=subprocess.PIPE, text=True, cwd=REPO, env=env(), start_new_session=True,
    )  # fmt: skip
    assert controller.stdout is not None
    for line in controller.stdout:
        if json.loads(line)["event"] == "launch_started":
            break
    time.sleep(1.0)  # importing torch
    tree = descendants(controller.pid)
    assert tree
    for pid in tree:
        os.kill(pid, signal.SIGTERM)
    time.sleep(0.3)
    controller.send_signal(signal.SIGTERM)
    controller.stdout.read()
    assert controller.wait(timeout=60) == 130
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["status"] == "cancelled"
    for phase in result["phases"]:
        assert phase["status"] == "cancelled", phase
        assert phase["error"]["code"] == "CANCELLED", phase
    assert _left_after(str(tmp_path / "launches")) == []


# ------------------------------------------------------------------------ non-finite scoring


def test_metrics_refuse_non_finite_arrays() -> None:
    np = pytest.importorskip("numpy")
    from cdit_runtime.metrics import (
        NonFiniteError,
        compare,
        compare_audio,
        compare_latents,
        non_finite,
    )

    ref = np.random.default_rng(0).random((1, 16, 16, 3))
    bad = ref.copy()
    bad[0, 0, 0, 0] = np.nan
    bad[0, 1, 0, 0] = np.inf
    assert non_finite(ref) is None
    assert non_finite(bad) == "1 NaN and 1 infinite of 768 values"
    with pytest.raises(NonFiniteError, match="the compared output 1 NaN and 1 infinite"):
        compare(ref, bad)
    with pytest.raises(NonFiniteError, match="the baseline's output"):
        compare(bad, ref)
    with pytest.raises(NonFiniteError, match="non-finite final latents"):
        compare_latents(ref, bad)
    with pytest.raises(NonFiniteError):
        compare_audio(ref[0, :, :, 0], bad[0, :, :, 0])
    # Before: NaN differences gave every frame a NaN PSNR, which the mean read as inf.
    all_nan = np.full_like(ref, np.nan)
    with pytest.raises(NonFiniteError, match="768 NaN of 768 values"):
        compare(ref, all_nan)


def _score(tmp_path: Path, output_nan: bool, latents_nan: bool, baseline_nan: bool = False):
    np = pytest.importorskip("numpy")
    pytest.importorskip("skimage")
    from cdit_runtime.contract import PhaseResult, load_request
    from cdit_runtime.controller import Controller

    request = load_request(
        {
            "model": {"source": "tiny", "family": "flux"},
            "outputDir": str(tmp_path),
            "phases": [{"kind": "baseline"}, {"kind": "ulysses"}],
            "dtype": "float32",
        }
    )
    controller = Controller(request)
    (tmp_path / "arrays").mkdir()
    rng = np.random.default_rng(1)
    image, latents = rng.random((1, 16, 16, 3)), rng.standard_normal((1, 64, 16))
    for spec in request.phases:
        controller.phases[spec.id] = PhaseResult(name=spec.id, kind=spec.kind, status="running")
    for name, nan_out, nan_lat in (
        ("baseline", baseline_nan, False),
        ("ulysses-2", output_nan, latents_nan),
    ):
        np.save(tmp_path / "arrays" / f"{name}.npy", np.where(nan_out, np.nan, image))
        np.save(tmp_path / "arrays" / f"{name}.latents.npy", np.where(nan_lat, np.nan, latents))
        record = {
            "status": "ok",
            "latenciesS": [1.0],
            "outputKind": "image",
            "files": {"array": f"arrays/{name}.npy", "latents": f"arrays/{name}.latents.npy"},
        }
        controller._phase_done(name, record)
    return controller.phases["baseline"], controller.phases["ulysses-2"]


@pytest.mark.parametrize(
    ("output_nan", "latents_nan", "says"),
    [
        (True, False, ["its output 768 NaN of 768 values"]),
        (False, True, ["its final latents 1024 NaN of 1024 values"]),
        (True, True, ["its output 768 NaN", "its final latents 1024 NaN"]),
    ],
)
def test_a_nan_phase_fails_as_non_finite(
    tmp_path: Path, output_nan: bool, latents_nan: bool, says: list[str]
) -> None:
    baseline, phase = _score(tmp_path, output_nan, latents_nan)
    assert baseline.verdict == "reference"
    assert phase.verdict == "fail"
    assert phase.verdict_reason is not None
    assert phase.verdict_reason.startswith("non-finite values:")
    for text in says:
        assert text in phase.verdict_reason
    assert phase.psnr_db is None and phase.latent_psnr_db is None
    assert not any("bit-identical" in note for note in phase.notes)


def test_a_nan_baseline_fails_and_nothing_is_compared_with_it(tmp_path: Path) -> None:
    baseline, phase = _score(tmp_path, False, False, baseline_nan=True)
    assert baseline.verdict == "fail"
    assert "its output 768 NaN of 768 values" in (baseline.verdict_reason or "")
    assert phase.verdict == "fail"
    assert "the baseline's output 768 NaN" in (phase.verdict_reason or "")


def test_a_control_at_the_pipelines_own_rerun_floor_says_so(tmp_path: Path, runtime: None) -> None:
    """A pipeline that does not reproduce itself (fresh noise in every transformer output, as
    GPU kernels with nondeterministic reductions make): its baseline's rerun (the first warmup)
    measures the floor, and the no-cache control, which sits on it, still fails, but says that
    this device cannot tell the integration's effect apart and what to do."""
    run = _fault_run(tmp_path / "out", "jitter", "--phases", "baseline,cache", "--steps", "3")
    assert run.code == 0, run.stderr
    baseline = run.phase("baseline")
    floor = baseline["rerunPsnrDb"]
    assert isinstance(floor, float) and floor < 80, floor
    assert any("does not reproduce itself" in note for note in baseline["notes"])
    control = run.phase("cache")["control"]
    assert control["verdict"] == "fail"
    assert "at the pipeline's own rerun floor" in control["reason"], control["reason"]
    assert "--deterministic" in control["reason"]
    assert run.phase("cache")["verdict"] == "fail"
