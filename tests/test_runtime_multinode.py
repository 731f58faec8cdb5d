"""Multi-node verification runs through torchrun's rendezvous (``cdit_runtime.multinode``).

The end-to-end tests simulate two nodes on the loopback interface: two ``verify`` commands
(``--node-rank 0`` and ``1``, one process each, gloo), each starting its own torchrun agent with
the c10d rendezvous at ``127.0.0.1:<free port>``. Each node gets its own output directory, as
nodes without a shared filesystem would: node 1 must build its own tiny model and must not write
results. The unit tests cover the flags, the plan, the event FIFO and the checks every worker
makes through the agent's store (duplicate node ranks, a node started with another request).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cdit_runtime.cli import add_verify_arguments, build_request, main
from cdit_runtime.contract import ContractError, NodeSpec, load_request
from cdit_runtime.errors import RunFailure
from cdit_runtime.launcher import free_port
from cdit_runtime.multinode import check_nodes, parse_endpoint, plan_for_nodes, remap_rank
from cdit_runtime.planning import REPLICATED

REPO = Path(__file__).resolve().parents[1]
FLUX = REPO / "tests" / "runtime_fixtures" / "flux_standalone.py"
RUN_TIMEOUT_S = 420


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def _request(phases: list[dict[str, Any]], **nodes: Any) -> Any:
    return load_request(
        {
            "model": {"source": "tiny", "family": "flux"},
            "outputDir": "/tmp/cdit-multinode-unit",
            "phases": phases,
            "nodes": nodes,
        }
    )


# ------------------------------------------------------------------------------ flags, plan


@pytest.mark.parametrize(
    ("nodes", "fragment"),
    [
        ({"nnodes": 2, "nodeRank": 2, "rdzvEndpoint": "h:1"}, "outside 0..1"),
        ({"nnodes": 2, "nodeRank": -1, "rdzvEndpoint": "h:1"}, "outside 0..1"),
        ({"nnodes": 0}, "nnodes must be >= 1"),
        ({"nnodes": 2}, "needs a rendezvous endpoint"),
        ({"nnodes": 2, "rdzvEndpoint": "head"}, "is not HOST:PORT"),
        ({"nnodes": 2, "rdzvEndpoint": "head:70000"}, "is not HOST:PORT"),
        ({"nnodes": 2, "rdzvEndpoint": "head:29500", "rdzvId": "a b"}, "rdzvId"),
        ({"nnodes": 2, "rdzvEndpoint": "head:29500", "nprocPerNode": 0}, "nprocPerNode"),
        ({"nnodes": 1, "nodeRank": 1}, "outside 0..0"),
    ],
)
def test_node_settings_are_checked(nodes: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ContractError, match=fragment):
        check_nodes(_request([{"kind": "baseline"}], **nodes))


def test_endpoints() -> None:
    assert parse_endpoint("10.0.0.1:29500") == ("10.0.0.1", 29500)
    assert parse_endpoint("node-001.cluster:1234") == ("node-001.cluster", 1234)
    assert parse_endpoint("[fe80::1]:29500") == ("[fe80::1]", 29500)
    ok = _request([{"kind": "ulysses"}, {"kind": "ulysses", "size": 4}], nnodes=2)
    check_nodes(replace(ok, nodes=NodeSpec(nnodes=2, node_rank=1, rdzv_endpoint="head:29500")))
    with pytest.raises(ContractError, match=r"2 launches need ports 65535..65536"):
        check_nodes(replace(ok, nodes=NodeSpec(nnodes=2, rdzv_endpoint="head:65535")))


def test_bad_node_flags_are_one_line_and_no_traceback(tmp_path: Path) -> None:
    cases = [
        (["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "127.0.0.1:29500"], "0..1"),
        (["--nnodes", "2", "--node-rank", "1"], "--rdzv-endpoint"),
        (["--nnodes", "2", "--rdzv-endpoint", "127.0.0.1"], "HOST:PORT"),
        (["--nnodes", "1", "--print-node-command"], "--nnodes 2 or more"),
    ]
    for flags, fragment in cases:
        proc = subprocess.run(
            [sys.executable, "-m", "cdit_runtime", "verify", "--tiny", "flux", *flags,
             "--out", str(tmp_path / "never")],
            capture_output=True, text=True, cwd=REPO, env=_env(), timeout=60, check=False,
        )  # fmt: skip
        assert proc.returncode == 2, (flags, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and fragment in lines[0], (flags, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert not (tmp_path / "never").exists()


def test_print_node_command_gives_every_node_the_same_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = [
        "--tiny", "flux", "--integration", str(FLUX), "--phases", "baseline,ulysses",
        "--nnodes", "2", "--rdzv-endpoint", "head-node:29500", "--node-rank", "1",
    ]  # fmt: skip
    assert main(["verify", *flags, "--print-node-command", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    commands = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(commands) == 3, text  # node 0, node 1, the Slurm form
    assert not list(tmp_path.iterdir()), "printing must not run anything"

    def request_of(command: str) -> dict[str, Any]:
        cd, _, rest = command.partition(" && ")
        assert cd == f"cd {shlex.quote(str(Path.cwd()))}"
        tokens = shlex.split(rest)
        assert tokens[:4] == [sys.executable, "-m", "cdit_runtime", "verify"]
        assert "--print-node-command" not in tokens
        parser = argparse.ArgumentParser()
        add_verify_arguments(parser)
        return build_request(parser.parse_args(tokens[4:]))

    node0, node1 = (request_of(c) for c in commands[:2])
    assert node0["nodes"]["nodeRank"] == 0 and node1["nodes"]["nodeRank"] == 1
    assert node0["nodes"]["rdzvEndpoint"] == "head-node:29500"
    assert node0["outputDir"] == node1["outputDir"] == str(tmp_path)
    node1["nodes"]["nodeRank"] = 0
    assert node0 == node1
    assert commands[2].endswith('--node-rank "$SLURM_NODEID"')
    torchrun = [line for line in text.splitlines() if "torchrun" in line]
    assert len(torchrun) == 1
    for part in (
        "--nnodes 2", "--nproc-per-node 1", "--rdzv-backend c10d",
        "--rdzv-endpoint head-node:29500", "-m cdit_runtime.worker",
    ):  # fmt: skip
        assert part in torchrun[0], torchrun[0]


def test_plan_over_nodes() -> None:
    phases = [
        {"kind": "baseline"},
        {"kind": "cache"},
        {"kind": "ulysses", "size": 2},
        {"kind": "ulysses", "size": 4, "name": "u4"},
        {"kind": "ulysses", "size": 3, "name": "u3"},
    ]
    request = _request(phases, nnodes=2, rdzvEndpoint="h:29500")
    launches, refused = plan_for_nodes(request, "cpu", 0)
    assert [launch.world for launch in launches] == [2, 4]
    first = {spec.id: rank for spec, rank in launches[0].phases}
    assert first == {"baseline": 0, "cache": REPLICATED, "ulysses-2": 0}
    assert launches[1].ids == ["u4"]
    assert set(refused) == {"u3"} and "split evenly over 2 nodes" in refused["u3"].message

    fixed = _request(phases, nnodes=2, rdzvEndpoint="h:29500", nprocPerNode=1)
    launches, refused = plan_for_nodes(fixed, "cpu", 0)
    assert [launch.world for launch in launches] == [2]
    assert set(refused) == {"u3", "u4"} and "2 nodes x 1 per node" in refused["u4"].message

    launches, refused = plan_for_nodes(request, "cuda", 1)  # one GPU per node
    assert [launch.world for launch in launches] == [2]
    assert refused["u4"].code == "MISSING_GPUS" and "2 GPUs on each of 2 nodes" in (
        refused["u4"].message
    )

    alone = _request([{"kind": "baseline"}, {"kind": "cache"}], nnodes=2, rdzvEndpoint="h:1")
    launches, refused = plan_for_nodes(alone, "cpu", 0)
    assert [launch.world for launch in launches] == [1] and not refused  # node 0 runs them


# ----------------------------------------------------------------------- worker-side pieces


def test_channel_writes_to_the_fifo_of_its_local_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cdit_runtime.contract.worker import Done, Ready
    from cdit_runtime.worker import Channel

    monkeypatch.delenv("CDIT_EVENT_FD", raising=False)
    monkeypatch.setenv("CDIT_EVENT_DIR", str(tmp_path))
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert Channel.from_env().fd is None  # no FIFO: events are dropped, nothing raises
    fifo = tmp_path / "rank1.fifo"
    os.mkfifo(fifo)
    assert Channel.from_env().fd is None  # no reader (the controller is gone): ENXIO
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        channel = Channel.from_env()
        assert channel.fd is not None
        channel.send(Ready(rank=3, import_s=0.5))
        message = json.loads(os.read(reader, 65536))
        assert message["type"] == "ready" and message["rank"] == 3 and message["importS"] == 0.5
    finally:
        os.close(reader)
    channel.send(Done(rank=3))  # reader closed: dropped, not a crash
    assert channel.fd is None


def test_rank_0_is_put_on_node_0() -> None:
    env = {
        "CDIT_NNODES": "2", "CDIT_NODE_RANK": "1", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
        "WORLD_SIZE": "4", "RANK": "0", "TORCHELASTIC_USE_AGENT_STORE": "True",
    }  # fmt: skip
    assert remap_rank(env) == (1, 1, 3)
    assert env["RANK"] == "3" and env["GROUP_RANK"] == "1"
    with pytest.raises(RunFailure, match="expected 2 nodes x 2"):
        remap_rank({**env, "WORLD_SIZE": "3"})
    with pytest.raises(RunFailure, match="did not share its rendezvous store"):
        remap_rank({**env, "TORCHELASTIC_USE_AGENT_STORE": "False"})


def test_nodes_are_checked_against_node_0_through_the_agent_store(tmp_path: Path) -> None:
    torch_distributed = pytest.importorskip("torch.distributed")
    import datetime

    from cdit_runtime.multinode_join import _check_with_node0, _Gate

    port = free_port()
    server = torch_distributed.TCPStore(
        "127.0.0.1", port, is_master=True, wait_for_workers=False,
        timeout=datetime.timedelta(seconds=10),
    )  # fmt: skip
    module_a = tmp_path / "a" / "integration.py"
    module_b = tmp_path / "b" / "integration.py"
    for module, text in ((module_a, "X = 1\n"), (module_b, "X = 2\n")):
        module.parent.mkdir()
        module.write_text(text)

    def spec(node: int, out: str, module: Path, steps: int = 4) -> dict[str, Any]:
        request = {
            "model": {"source": "tiny", "family": "flux"},
            "outputDir": out,
            "integration": {"kind": "standalone", "path": str(module)},
            "nodes": {"nnodes": 2, "nodeRank": node, "rdzvEndpoint": "h:1"},
            "launchTimeoutS": 2,
        }
        return {"request": request, "steps": steps, "device": "cpu", "phases": [], "threads": 8}

    def gate(run: str) -> _Gate:
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TORCHELASTIC_RUN_ID": run}
        return _Gate(env, limit_s=2)

    def check(run: str, node: int, local: int, rank: int, payload: dict[str, Any]) -> None:
        _check_with_node0(gate(run), payload, node, local, rank)

    copy = tmp_path / "copy.py"
    copy.write_text(module_a.read_text())
    check("ok", 0, 0, 0, spec(0, "/out/node0", module_a))
    # Another output directory, node rank, thread count and module path (same bytes): fine.
    check("ok", 1, 0, 1, {**spec(1, "/elsewhere", copy), "threads": 2})
    with pytest.raises(RunFailure, match="two nodes were started with --node-rank 1"):
        check("ok", 1, 0, 1, spec(1, "/elsewhere", module_a))
    with pytest.raises(RunFailure, match=r"differs in generation settings"):
        check("ok", 1, 1, 2, spec(1, "/out", module_a, steps=5))
    with pytest.raises(RunFailure, match=r"differs in integration module"):
        check("ok", 1, 2, 3, spec(1, "/out", module_b))
    with pytest.raises(RunFailure, match="node 0 did not describe its launch"):
        check("no-node-0", 1, 0, 1, spec(1, "/out", module_a))  # waits launchTimeoutS (2 s)

    # The gate: a rank that failed its checks makes every rank fail with its error, at once; it
    # stays (keeping its node's launch, which may host the store) until the others have read it.
    import threading

    failing, waiting = gate("gated"), gate("gated")
    _check_with_node0(waiting, spec(0, "/out", module_a), 0, 0, 0)
    with pytest.raises(RunFailure) as failed:
        _check_with_node0(failing, spec(1, "/out", module_a, steps=5), 1, 0, 1)
    posting = threading.Thread(target=failing.fail, args=(1, 1, 2, failed.value))
    posting.start()
    started = time.time()
    with pytest.raises(RunFailure, match="rank 1 on node 1: node 1 was started with a diff") as err:
        waiting.pass_and_wait(world=2)
    assert err.value.info.code == "RENDEZVOUS" and time.time() - started < 1.5
    posting.join(timeout=5)
    assert not posting.is_alive()  # released once the other rank read the error
    with pytest.raises(RunFailure, match="only 1 of 2 ranks were ready within 2 s"):
        gate("nobody-else").pass_and_wait(world=2)
    gate("both").pass_and_wait(world=1)  # every rank in: passes
    del server


# ---------------------------------------------------------------------- two nodes, loopback


def _verify(node: int, port: int, out: Path, *extra: str) -> subprocess.Popen[str]:
    command = [
        sys.executable, "-m", "cdit_runtime", "verify",
        "--tiny", "flux", "--integration", str(FLUX), "--phases", "baseline,ulysses",
        "--steps", "2", "--warmup", "0",
        "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
        "--rdzv-endpoint", f"127.0.0.1:{port}", "--out", str(out), *extra,
    ]  # fmt: skip
    env = {**_env(), "GLOO_SOCKET_IFNAME": "lo"}
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _leftovers(*folders: Path) -> str:
    found = []
    for folder in folders:
        proc = subprocess.run(
            ["pgrep", "-af", str(folder / "launches")], capture_output=True, text=True, check=False
        )
        found += [line for line in proc.stdout.splitlines() if "pgrep" not in line]
    return "\n".join(found)


def _psnr(value: float | str | None) -> float:
    return math.inf if value == "inf" else float(value or 0.0)


def test_two_nodes_on_loopback_run_a_context_parallel_phase(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("diffusers")
    pytest.importorskip("cache_dit")
    port = free_port()
    out0, out1 = tmp_path / "node0", tmp_path / "node1"  # no shared filesystem
    started = time.time()
    nodes = [_verify(0, port, out0), _verify(1, port, out1)]
    try:
        outputs = [node.communicate(timeout=RUN_TIMEOUT_S) for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.terminate()
                node.wait(timeout=60)
    wall = time.time() - started
    (stdout0, stderr0), (stdout1, stderr1) = outputs
    assert nodes[0].returncode == 0, stderr0[-3000:]
    assert nodes[1].returncode == 0, stderr1[-3000:]

    result = json.loads((out0 / "results.json").read_text())
    phases = {p["name"]: p for p in result["phases"]}
    assert phases["baseline"]["status"] == "ok"
    ulysses = phases["ulysses-2"]
    assert ulysses["status"] == "ok", ulysses.get("error")
    assert ulysses["verdict"] == "pass"
    psnr = _psnr(ulysses["psnrDb"])
    assert math.isinf(psnr) or psnr > 80, psnr  # float32: a correct CP plan is near-exact
    assert ulysses["config"]["devices"] == ["cpu", "cpu"]  # gathered from both nodes' ranks
    (launch,) = result["launches"]
    assert launch["worldSize"] == 2 and launch["nodes"] == 2
    assert launch["rendezvous"] == f"127.0.0.1:{port}/cdit-verify-launch1"
    assert launch["exitCodes"] == [0]

    # Node 1 ran its rank on its own copy of the model and wrote no results.
    assert not (out1 / "results.json").exists()
    assert (out1 / "model-flux" / "text_encoder" / "model.safetensors").is_file()
    assert (out1 / "launches" / "launch1.node1.json").is_file()
    events1 = [json.loads(line) for line in stdout1.splitlines() if line.strip()]
    assert events1[-1]["event"] == "run_finished" and events1[-1]["status"] == "completed"
    assert not any(e["event"] == "phase_finished" and e.get("status") == "ok" for e in events1)
    assert "node 1 of 2: completed" in stderr1
    events0 = [json.loads(line) for line in stdout0.splitlines() if line.strip()]
    assert any("over 2 nodes" in (e.get("message") or "") for e in events0)
    assert _leftovers(out0, out1) == ""
    print(f"two-node loopback run: {wall:.1f} s, ulysses PSNR {ulysses['psnrDb']}")


def test_a_node_that_never_joins_is_a_rendezvous_error(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "node0"
    started = time.time()
    node0 = _verify(0, free_port(), out, "--launch-timeout", "6")
    try:
        _stdout, stderr = node0.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if node0.poll() is None:
            node0.kill()
    wall = time.time() - started
    assert node0.returncode == 1, stderr[-3000:]
    assert "Traceback" not in stderr
    result = json.loads((out / "results.json").read_text())
    errors = [p["error"] for p in result["phases"]]
    assert [e["code"] for e in errors] == ["RENDEZVOUS", "RENDEZVOUS"], errors
    assert "timed out after 6 s: not all 2 nodes joined" in errors[0]["message"]
    assert "--node-rank" in errors[0]["hint"]
    assert result["launches"][0]["exitCodes"] != [0]
    assert wall < 90, wall  # the join timeout, not the 900 s default
    assert _leftovers(out) == ""


def test_cancel_on_node_0_ends_every_process_of_both_nodes(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("diffusers")
    pytest.importorskip("cache_dit")
    port = free_port()
    out0, out1 = tmp_path / "node0", tmp_path / "node1"
    long_run = ("--phases", "ulysses", "--steps", "400")  # no baseline: straight to the CP phase
    nodes = [_verify(k, port, out, *long_run) for k, out in ((0, out0), (1, out1))]
    try:
        stdout = nodes[0].stdout
        assert stdout is not None
        deadline = time.time() + RUN_TIMEOUT_S
        for line in stdout:
            event = json.loads(line)
            if event["event"] == "phase_started" and event.get("phase") == "ulysses-2":
                break
            assert time.time() < deadline
        assert _leftovers(out0) and _leftovers(out1), "both agents and their workers run"
        nodes[0].send_signal(signal.SIGTERM)
        stdout.read()
        assert nodes[0].wait(timeout=60) == 130
        # Node 1's rank loses its peer in the collective; its torchrun fails, so does its verify.
        assert nodes[1].wait(timeout=180) == 1
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.wait(timeout=30)
    result = json.loads((out0 / "results.json").read_text())
    assert result["status"] == "cancelled"
    assert [(p["name"], p["status"]) for p in result["phases"]] == [("ulysses-2", "cancelled")]
    assert _leftovers(out0, out1) == "", "a torchrun agent or worker survived the cancel"


def test_a_busy_rendezvous_port_is_reported_at_once(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import socket

    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = tmp_path / "node0"
        started = time.time()
        proc = _verify(0, port, out)
        _, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 1, stderr[-3000:]
    assert time.time() - started < 60  # not the 900 s launch timeout
    error = json.loads((out / "results.json").read_text())["phases"][0]["error"]
    assert error["code"] == "RENDEZVOUS"
    assert "could not host the rendezvous store" in error["message"], error
    assert "already in use" in error["message"]
    assert _leftovers(out) == ""


def test_agent_log_is_read_as_a_join_or_a_peer_failure(tmp_path: Path) -> None:
    from cdit_runtime.launcher import Rank
    from cdit_runtime.multinode_launch import NodeLaunch, _EventReader

    log = tmp_path / "launch1.node1.log"
    log.write_text(
        "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.1]\n"
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: store failed\n"
    )
    agent = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    agent.wait()
    fifo = tmp_path / "rank0.fifo"
    os.mkfifo(fifo)
    reader = _EventReader(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK), "rb")
    launch = NodeLaunch(
        "launch1", agent=agent, log=log, endpoint="head:29500", rdzv_id="cdit-verify-launch1",
        nnodes=2, node_rank=1, join_timeout_s=30,
        ranks=[Rank(1, agent, reader, log)],  # type: ignore[arg-type]
    )  # fmt: skip
    try:
        joined = launch.diagnose()  # the rank never wrote: the rendezvous itself failed
        assert joined is not None and joined.code == "RENDEZVOUS"
        assert "node 1 could not reach the rendezvous at head:29500" in joined.message
        writer = os.open(fifo, os.O_WRONLY)
        os.write(writer, b'{"type": "ready"}\n')
        os.close(writer)
        assert reader.read()
        peer = launch.diagnose()  # the rank ran: another node went away
        assert peer is not None and peer.code == "WORKER_DIED"
        assert "a rank on another node stopped (connection closed)" in peer.message
        assert "logs/launch1.node*.log" in peer.message
    finally:
        reader.close()


def test_a_node_started_with_another_request_fails_every_node_with_the_difference(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch")
    port = free_port()
    out0, out1 = tmp_path / "node0", tmp_path / "node1"
    started = time.time()
    nodes = [_verify(0, port, out0), _verify(1, port, out1, "--steps", "3")]
    try:
        outputs = [node.communicate(timeout=RUN_TIMEOUT_S) for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.wait(timeout=30)
    assert [node.returncode for node in nodes] == [1, 1], [err[-2000:] for _, err in outputs]
    assert time.time() - started < 120  # at once, not after the collective timeout
    result = json.loads((out0 / "results.json").read_text())
    for phase in result["phases"]:
        error = phase["error"]
        assert error["code"] == "RENDEZVOUS", error
        assert "node 1 was started with a different request than node 0" in error["message"]
        assert "generation settings" in error["message"]
    assert "different request than node 0" in outputs[1][1]  # node 1 says it too
    assert "generation settings" in outputs[1][1]
    assert _leftovers(out0, out1) == ""
