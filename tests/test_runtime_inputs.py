"""Bad `verify` input: exit 2 with one line on stderr, before any worker starts.

Every case runs the real ``python -m cdit_runtime verify`` (no torch is imported before the
request is refused, so each takes a fraction of a second): no traceback, no progress event, no
results.json, no launch. The request file may be anything (an array, a string, not UTF-8, nested
too deeply, a FIFO, a folder), the output folder unusable, the numbers absurd, the integration
missing, or the phases larger than the host runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from runtime_cli import env

FIXTURES = Path(__file__).resolve().parent / "runtime_fixtures"
FLUX = str(FIXTURES / "flux_standalone.py")
BAD = "cdit-integrate verify: bad request:"
USAGE = "python -m cdit_runtime verify: error:"


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdit_runtime", "verify", *args],
        capture_output=True,
        text=True,
        timeout=60,  # a FIFO that were opened would block forever
        cwd=cwd,
        env=env(),
        check=False,
    )


def _file(tmp: Path, name: str, content: str | bytes) -> str:
    path = tmp / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return str(path)


def _request(tmp: Path, name: str, **fields: object) -> str:
    data = {"model": {"source": "tiny", "family": "flux"}, "outputDir": str(tmp / "out")}
    data.update(fields)
    return _file(tmp, name, json.dumps(data))


def _fifo(tmp: Path) -> str:
    path = tmp / "request.fifo"
    os.mkfifo(path)
    return str(path)


def _a_file(tmp: Path) -> str:
    return _file(tmp, "a-file", "x")


# name -> (arguments built in a temporary folder, what the one line says)
Case = tuple[Callable[[Path], list[str]], str]
CASES: dict[str, Case] = {
    # the request file
    "request is a JSON array": (lambda t: [_file(t, "r.json", "[1, 2]")], "a JSON array"),
    "request is a JSON string": (lambda t: [_file(t, "r.json", '"flux"')], "a JSON string"),
    "request is a JSON number": (lambda t: [_file(t, "r.json", "3")], "a JSON number"),
    "request is not UTF-8": (lambda t: [_file(t, "r.json", b'{"x": "\xe9"}')], "not UTF-8"),
    "request nested too deeply": (
        lambda t: [_file(t, "r.json", "[" * 100_000 + "]" * 100_000)],
        "nested too deeply",
    ),
    "request is a FIFO": (lambda t: [_fifo(t)], "not a regular file"),
    "request is a folder": (lambda t: [str(t)], "not a regular file"),
    "request is missing": (lambda t: [str(t / "nope.json")], "no such file"),
    "request is not JSON": (lambda t: [_file(t, "r.json", "{model: 1")], "not JSON"),
    "model is a number": (lambda t: [_request(t, "r.json", model=5)], "model: expected an object"),
    "cache is a list": (
        lambda t: [_request(t, "r.json", cache=[1])],
        "cache: expected an object",
    ),
    "empty phase list": (lambda t: [_request(t, "r.json", phases=[])], "phases: empty"),
    "phase timeout negative": (
        lambda t: [_request(t, "r.json", phases=[{"kind": "baseline", "timeoutS": -1}])],
        "phases[0].timeoutS must be a finite number of seconds > 0",
    ),
    "hybrid cpSize 0": (
        lambda t: [_request(t, "r.json", phases=[{"kind": "hybrid", "cpSize": 0}])],
        "phases[0].cpSize must be >= 1",
    ),
    "NUL in the output dir": (
        lambda t: [_request(t, "r.json", outputDir=f"{t}/a\u0000b")],
        "output dir",
    ),
    "NUL in the integration path": (
        lambda t: [
            _request(t, "r.json", integration={"kind": "standalone", "path": f"{t}/a\u0000.py"})
        ],
        "contains a NUL byte",
    ),
    # --out
    "--out is a file": (lambda t: ["--out", _a_file(t)], "exists and is not a directory"),
    "--out under a file": (lambda t: ["--out", f"{_a_file(t)}/sub"], "cannot be created"),
    "--out on a read-only file system": (
        lambda t: ["--out", "/sys/cdit-verify"],
        "output dir /sys/cdit-verify: cannot be created",
    ),
    "--out in /proc": (lambda t: ["--out", "/proc/self"], "not writable"),
    # numbers
    "--size 0": (lambda t: ["--size", "0"], "--size 0: the degree of the parallel phases"),
    "--size -3": (lambda t: ["--size", "-3"], "must be >= 2"),
    "--size 1": (lambda t: ["--size", "1"], "must be >= 2"),
    "--phases ,,": (lambda t: ["--phases", ",,"], "names no phase"),
    "--phases empty": (lambda t: ["--phases", ""], "names no phase"),
    "--phases unknown kind": (lambda t: ["--phases", "baseline,warp"], "'warp' is not one of"),
    "--height -5": (lambda t: ["--height", "-5"], "height must be >= 1 (got -5)"),
    "--width 0": (lambda t: ["--width", "0"], "width must be >= 1"),
    "--frames -1": (lambda t: ["--frames", "-1"], "numFrames must be >= 1"),
    "--steps -1": (lambda t: ["--steps", "-1"], "steps must be >= 1"),
    "--steps 0": (lambda t: ["--steps", "0"], "steps must be >= 1"),
    "--warmup -1": (lambda t: ["--warmup", "-1"], "warmup must be >= 0"),
    "--warmup-steps 0": (lambda t: ["--warmup-steps", "0"], "warmupSteps must be >= 1"),
    "--repeat 0": (lambda t: ["--repeat", "0"], "repeat must be >= 1"),
    "--timeout -1": (lambda t: ["--timeout", "-1"], "timeoutS must be a finite number"),
    "--timeout 0": (lambda t: ["--timeout", "0"], "timeoutS must be a finite number"),
    "--timeout nan": (lambda t: ["--timeout", "nan"], "timeoutS must be a finite number"),
    "--timeout inf": (lambda t: ["--timeout", "inf"], "timeoutS must be a finite number"),
    "--launch-timeout nan": (lambda t: ["--launch-timeout", "nan"], "launchTimeoutS must be"),
    "--guidance nan": (lambda t: ["--guidance", "nan"], "guidanceScale must be a finite number"),
    "--rdt nan": (lambda t: ["--rdt", "nan"], "cache.residualDiffThreshold must be a finite"),
    "--rdt -1": (lambda t: ["--rdt", "-1"], "cache.residualDiffThreshold must be >= 0"),
    "--calibrate-rdt 2": (lambda t: ["--calibrate-rdt", "2"], "between 0 and 1"),
    "--fn -1": (lambda t: ["--fn", "-1"], "cache.fn must be >= 0"),
    "--size abc": (lambda t: ["--size", "abc"], "invalid int value: 'abc'"),
    "--call-arg not JSON": (lambda t: ["--call-arg", "x=nope"], "is not JSON"),
    "--nnodes 0": (lambda t: ["--nnodes", "0"], "nnodes must be >= 1"),
    # the integration and other paths
    "integration module missing": (
        lambda t: ["--integration", str(t / "nope.py")],
        "integration module",
    ),
    "integration module is a folder": (
        lambda t: ["--integration", str(t)],
        "is not a regular file",
    ),
    "integration module is not Python": (
        lambda t: ["--integration", _file(t, "m.py", "def enable(:\n")],
        "syntax error at line 1",
    ),
    "checkout is not cache-dit": (lambda t: ["--checkout", str(t)], "is not a cache-dit checkout"),
    "source file missing": (
        lambda t: ["--tiny", "flux", "--source-file", str(t / "nope.py")],
        "model source file",
    ),
    "reference missing": (lambda t: ["--reference", str(t / "nope")], "is not a directory"),
    # more processes than the host runs
    "--size 4096 on CPU": (
        lambda t: ["--device", "cpu", "--phases", "baseline,ulysses", "--size", "4096"],
        "ulysses-4096: needs 4096 processes on this host",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_exit_2_and_starts_nothing(tmp_path: Path, case: str) -> None:
    build, expected = CASES[case]
    args = build(tmp_path)
    out = tmp_path / "run"
    if "--out" not in args and not args[0].endswith("r.json"):  # a request names its own
        args += ["--out", str(out)]
    started = time.time()
    proc = _run(args, tmp_path)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout == "", "no progress event: nothing started"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith((BAD, USAGE)), lines[0]
    assert expected in lines[0], lines[0]
    assert "Traceback" not in proc.stderr
    assert not (out / "results.json").exists() and not (out / "launches").exists()
    assert not (tmp_path / "out" / "launches").exists()
    assert time.time() - started < 30


def test_read_only_output_dir(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        proc = _run(["--out", str(folder)], tmp_path)
    finally:
        folder.chmod(0o755)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"{BAD} output dir {folder}: not writable (Permission denied)"
    ]


def test_an_oversized_cpu_run_is_refused_before_spawning(tmp_path: Path) -> None:
    from cdit_runtime.planning import MIN_CPU_PROCESSES, cpu_process_limit

    limit = cpu_process_limit()
    assert limit >= MIN_CPU_PROCESSES  # hybrid (4 processes) runs on any CPU host
    proc = _run(
        ["--device", "cpu", "--phases", "ulysses", "--size", str(limit + 1), "--out", "o"],
        tmp_path,
    )
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert f"a CPU run starts at most {limit} here" in line
    assert f"lower the phase size (--size) to {limit} or less" in line
    assert not (tmp_path / "o").exists()  # refused before the output folder was made


def test_the_controller_skips_phases_larger_than_the_host(tmp_path: Path) -> None:
    """Without the CLI (a request built in code): the phase is skipped as data, not spawned."""
    from cdit_runtime.contract import load_request
    from cdit_runtime.multinode import plan_for_nodes
    from cdit_runtime.planning import cpu_process_limit

    too_many = cpu_process_limit() + 1
    request = load_request(
        {
            "model": {"source": "tiny", "family": "flux"},
            "outputDir": str(tmp_path),
            "phases": [{"kind": "baseline"}, {"kind": "ulysses", "size": too_many}],
        }
    )
    launches, refused = plan_for_nodes(request, "cpu", 0)
    assert [plan.ids for plan in launches] == [["baseline"]]
    assert refused[f"ulysses-{too_many}"].code == "BAD_REQUEST"
    assert "processes on this host" in refused[f"ulysses-{too_many}"].message
    assert plan_for_nodes(request, "cuda", 0)[1][f"ulysses-{too_many}"].code == "MISSING_GPUS"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"steps": 0}, "steps must be >= 1"),
        ({"height": -1, "width": -1}, "height must be >= 1 (got -1); width must be >= 1"),
        ({"timeoutS": float("nan")}, "timeoutS must be a finite number of seconds > 0"),
        ({"launchTimeoutS": 0}, "launchTimeoutS must be a finite number of seconds > 0"),
        ({"phases": [{"kind": "ulysses", "size": 0}]}, "phases[0].size must be >= 1"),
        ({"cache": {"warmupInterval": 0}}, "cache.warmupInterval must be >= 1"),
        ({"thresholds": {"ssimMin": float("inf")}}, "thresholds.ssimMin must be a finite"),
    ],
)
def test_requests_with_unusable_values_are_refused(fields: dict, message: str) -> None:
    """`load_request` (the CLI and the language server's runs): before anything launches."""
    from cdit_runtime.contract import ContractError, load_request

    data = {"model": {"source": "tiny", "family": "flux"}, "outputDir": "/o", **fields}
    with pytest.raises(ContractError) as caught:
        load_request(data)
    assert message in str(caught.value)
