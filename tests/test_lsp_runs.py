"""Verification runs through `workspace/executeCommand`: a separate process of the configured
interpreter, `$/progress` reports, `cdit/runProgress` events with the final result, cancellation
that ends the whole process tree, and workspace trust.

The runtime here is the stand-in in `tests/lsp_fixtures/fake_workspace` (the real one needs
torch); it speaks the real contract (`cdit_runtime.contract`), which the server validates.
"""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from lsp_server.features.process_tree import alive
from tests.lsp_fixtures import HERE, server_config, start_session

pytestmark = pytest.mark.asyncio(loop_scope="module")

WORKSPACE = HERE / "fake_workspace"


@pytest_lsp.fixture(config=server_config(), scope="module")
async def client(lsp_client: LanguageClient):
    settings = {"interpreter": sys.executable, "thresholds": {"ssimMin": 0.8}}
    await start_session(lsp_client, WORKSPACE, settings=settings)
    yield
    await lsp_client.shutdown_session()


def request(tmp_path, mode: str = "quick") -> dict:
    return {
        "model": {"source": "tiny", "family": "flux"},
        "outputDir": str(tmp_path / "out"),
        "phases": [{"kind": "baseline"}, {"kind": "cache"}],
        "dtype": "float32",
        "device": "cpu",
        "extraCallKwargs": {"fake": mode},
    }


async def execute(client: LanguageClient, command: str, argument: dict) -> dict:
    return await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=command, arguments=[argument])
    )


async def test_run_reports_progress_and_the_final_result(client: LanguageClient, tmp_path):
    report = await execute(
        client, "cdit.lsp.runVerification", {"request": request(tmp_path), "wait": True}
    )
    assert report["exitCode"] == 0 and report["cancelled"] is False
    assert report["result"]["status"] == "completed"
    assert [p["verdict"] for p in report["result"]["phases"]] == ["pass", "pass"]
    run_id = report["runId"]
    notes = [n for n in client.cdit_runs if n.runId == run_id]
    events = [n.event for n in notes if hasattr(n, "event")]
    assert [e.event for e in events][:2] == ["run_started", "phase_started"]
    assert events[-1].event == "run_finished"
    # The threshold override from the settings reached the runtime.
    assert json.loads(events[0].message) == {"thresholds": {"ssimMin": 0.8}}
    assert notes[-1].done is True and notes[-1].result.status == "completed"
    # $/progress: begin, one report per event, end.
    progress = client.progress_reports[report["progressToken"]]
    assert isinstance(progress[0], types.WorkDoneProgressBegin) and progress[0].cancellable
    assert isinstance(progress[-1], types.WorkDoneProgressEnd)
    reports = [p for p in progress if isinstance(p, types.WorkDoneProgressReport)]
    assert len(reports) == len(events)
    assert any(r.message == "baseline step 2/3" and r.percentage == 67 for r in reports)


async def test_cancel_ends_the_process_tree(client: LanguageClient, tmp_path):
    started = await execute(
        client, "cdit.lsp.runVerification", {"request": request(tmp_path, "hang")}
    )
    run_id = started["runId"]
    pids = await wait_for_pids(client, run_id)
    assert len(pids) == 4 and all(alive(pid) for pid in pids)
    cancelled = await execute(client, "cdit.lsp.cancelRun", {"runId": run_id})
    assert cancelled == {"runId": run_id, "cancelled": True}
    for _ in range(100):
        if not any(alive(pid) for pid in pids):
            break
        await asyncio.sleep(0.05)
    assert not [pid for pid in pids if alive(pid)]
    final = [n for n in client.cdit_runs if n.runId == run_id and getattr(n, "done", False)]
    assert final and final[-1].cancelled is True
    again = await execute(client, "cdit.lsp.cancelRun", {"runId": run_id})
    assert again["error"]["code"] == "unknown-run"


async def wait_for_pids(client: LanguageClient, run_id: str) -> list[int]:
    for _ in range(200):
        for note in client.cdit_runs:
            event = getattr(note, "event", None)
            if note.runId == run_id and event is not None and event.event == "phase_started":
                return json.loads(event.message)["pids"]
        await asyncio.sleep(0.05)
    raise AssertionError("the stand-in runtime did not report its processes")


@pytest_lsp.fixture(config=server_config())
async def short_lived(lsp_client: LanguageClient):
    await start_session(lsp_client, WORKSPACE, settings={"interpreter": sys.executable})
    yield


@pytest.mark.asyncio
async def test_server_shutdown_ends_running_verifications(short_lived: LanguageClient, tmp_path):
    client = short_lived
    started = await execute(
        client, "cdit.lsp.runVerification", {"request": request(tmp_path, "hang")}
    )
    pids = await wait_for_pids(client, started["runId"])
    assert all(alive(pid) for pid in pids)
    await client.shutdown_session()
    for _ in range(100):
        if not any(alive(pid) for pid in pids):
            break
        await asyncio.sleep(0.05)
    assert not [pid for pid in pids if alive(pid)]


async def test_bad_requests_are_refused_before_anything_starts(client: LanguageClient, tmp_path):
    bad = {**request(tmp_path), "phases": [{"kind": "warp"}]}
    result = await execute(client, "cdit.lsp.runVerification", {"request": bad})
    assert result["error"]["code"] == "BAD_REQUEST" and "warp" in result["error"]["message"]
    missing = await execute(client, "cdit.lsp.runVerification", {"uri": "file:///x.py"})
    assert missing["error"]["code"] == "no-request"


@pytest_lsp.fixture(config=server_config(), scope="module")
async def real_client(lsp_client: LanguageClient, tmp_path_factory):
    # A workspace without a stand-in: `python -m cdit_runtime` is the real runtime.
    await start_session(lsp_client, tmp_path_factory.mktemp("workspace"))
    yield
    await lsp_client.shutdown_session()


async def test_real_runtime_on_a_tiny_cpu_model(real_client: LanguageClient, tmp_path):
    tiny = {
        "model": {"source": "tiny", "family": "flux"},
        "outputDir": str(tmp_path / "out"),
        "phases": [{"kind": "baseline"}, {"kind": "cache"}],
        "dtype": "float32",
        "device": "cpu",
        "steps": 4,
        # random weights cache nothing at real thresholds: calibrate so that caching happens
        "cache": {"calibrateShare": 0.5, "maxWarmupSteps": 1},
    }
    report = await execute(real_client, "cdit.lsp.runVerification", {"request": tiny, "wait": True})
    assert report["exitCode"] == 0, report.get("stderrTail")
    result = report["result"]
    assert result["status"] == "completed"
    verdicts = {p["name"]: p["verdict"] for p in result["phases"]}
    assert verdicts["baseline"] == "reference" and verdicts["cache"] in ("pass", "warn")
    cache = next(p for p in result["phases"] if p["name"] == "cache")
    assert cache["cachedSteps"] >= 1 and cache["control"]["verdict"] == "pass"
    progress = real_client.progress_reports[report["progressToken"]]
    messages = [p.message for p in progress if isinstance(p, types.WorkDoneProgressReport)]
    assert "cache step 4/4" in messages
    events = [n.event.event for n in real_client.cdit_runs if hasattr(n, "event")]
    assert events[0] == "run_started" and events[-1] == "run_finished"
