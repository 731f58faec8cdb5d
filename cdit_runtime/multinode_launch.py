"""Multi-node launches, controller side: this node's torchrun agent and its local ranks.

`start_node_launch` starts ``torchrun`` for this node's share of a launch, with one FIFO per
local rank for the workers' events (torchrun passes no file descriptors). `NodeLaunch` ends the
agent's whole process tree and reads the agent's log to say why a launch failed. See `multinode`.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .contract import ErrorInfo, NodeSpec
from .errors import RunFailure, error_info
from .guard import parent_watch
from .launcher import _PACKAGE_PARENT, Launch, Rank
from .multinode_plan import local_world, parse_endpoint

__all__ = ["NodeLaunch", "start_node_launch", "torchrun_command"]

# Environment of a torchrun worker, set by the node's controller.
ENV_NNODES = "CDIT_NNODES"
ENV_NODE_RANK = "CDIT_NODE_RANK"
ENV_EVENT_DIR = "CDIT_EVENT_DIR"

_AGENT_SLACK_S = 60.0  # torchrun's start and exit around its join timeout
# Variables of an enclosing distributed job that must not leak into a nested torchrun.
_DIST_ENV = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE",
    "CDIT_EVENT_FD",
)


# What a failed agent's log says, most specific first: (sign, error code, message template).
# Before any local worker started, the rendezvous itself failed:
_JOIN_SIGNS: tuple[tuple[str, str, str], ...] = (
    (
        "EADDRINUSE",
        "RENDEZVOUS",
        "node {k} could not host the rendezvous store: the port of {endpoint} is already in use "
        "here (another run or service; pick another port)",
    ),
    (
        "RendezvousTimeoutError",
        "RENDEZVOUS",
        "the rendezvous at {endpoint} timed out after {join:.0f} s: not all {n} nodes joined "
        "(node {k} waited; start the same verify on every node, --node-rank 0..{last})",
    ),
    (
        "RendezvousClosedError",
        "RENDEZVOUS",
        "the rendezvous {rdzv_id} at {endpoint} was closed: another node's torchrun stopped "
        "(see that node's verify output and logs)",
    ),
    (
        "RendezvousConnectionError",
        "RENDEZVOUS",
        "node {k} could not reach the rendezvous at {endpoint} (node 0 hosts it: check the "
        "address, the port and the firewall, and that node 0 runs)",
    ),
    (
        "RendezvousStateError",
        "RENDEZVOUS",
        "the rendezvous {rdzv_id} at {endpoint} is in an unexpected state (a stale run with the "
        "same id? use another --rdzv-id or port)",
    ),
    (
        "DistNetworkError",
        "RENDEZVOUS",
        "node {k} could not open or reach the rendezvous store at {endpoint} (port in use on "
        "node 0, wrong address, or a firewall)",
    ),
)
# After the workers started, another node going away is what these mean:
_PEER = (
    "a rank on another node stopped ({what}), so this node's ranks could not go on: see the "
    "other nodes' verify output and their <out>/logs/{name}.node*.log"
)
_STORE_GONE = (
    "node 0's rendezvous store at {endpoint} went away during the run (node 0's verify or "
    "torchrun stopped: see its output)"
)
_RUN_SIGNS: tuple[tuple[str, str, str], ...] = (
    ("Connection closed by peer", "WORKER_DIED", _PEER.replace("{what}", "connection closed")),
    ("Connection reset by peer", "WORKER_DIED", _PEER.replace("{what}", "connection reset")),
    ("RendezvousConnectionError", "WORKER_DIED", _STORE_GONE),
    ("RendezvousClosedError", "WORKER_DIED", _STORE_GONE),
    ("DistNetworkError", "WORKER_DIED", _STORE_GONE),
)


class _EventReader(io.FileIO):
    """The controller's end of a rank's FIFO; remembers whether the rank ever wrote to it."""

    seen = False

    def read(self, size: int = -1) -> bytes | None:
        data = super().read(size)
        if data:
            self.seen = True
        return data


def _proc_stat(pid: int) -> tuple[int, int, int] | None:
    """(ppid, pgid, start time) of a live process, from /proc (None: gone or not Linux)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return int(fields[1]), int(fields[2]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _process_tree(root: int) -> dict[int, tuple[int, int]]:
    """pid → (pgid, start time) of ``root`` and its descendants (Linux; just ``root`` elsewhere)."""
    children: dict[int, list[int]] = {}
    stats: dict[int, tuple[int, int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                stat = _proc_stat(int(entry))
                if stat is not None:
                    children.setdefault(stat[0], []).append(int(entry))
                    stats[int(entry)] = (stat[1], stat[2])
    tree: dict[int, tuple[int, int]] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in tree:
            continue
        tree[pid] = stats.get(pid, (pid, -1))
        todo.extend(children.get(pid, []))
    return tree


@dataclass
class NodeLaunch(Launch):
    """This node's share of a multi-node launch: one torchrun agent and its local ranks.

    ``ranks`` are the local ranks (global rank numbers), each reading its FIFO; their exit code is
    the agent's (torchrun reports its workers' failures by its own exit status).
    """

    agent: subprocess.Popen[bytes] | None = None
    fifo_dir: Path | None = None
    log: Path | None = None
    endpoint: str = ""
    rdzv_id: str = ""
    nnodes: int = 1
    node_rank: int = 0
    join_timeout_s: float = 0.0
    tree: dict[int, tuple[int, int]] = field(default_factory=dict)
    remembered_at: float = 0.0

    def alive(self) -> bool:
        running = self.agent is not None and self.agent.poll() is None
        if running and time.time() - self.remembered_at >= 1.0:
            # The tree as it grows (the controller asks twice a second): what the ranks start
            # is killed by `close` even after a normal end, when nothing is left to trace.
            self.remembered_at = time.time()
            self._remember_tree()
        return running

    def _remember_tree(self) -> None:
        if self.agent is not None and self.agent.poll() is None:
            self.tree.update(_process_tree(self.agent.pid))

    def terminate(self, grace_s: float = 5.0) -> None:
        """SIGTERM to torchrun (it stops its workers), then SIGKILL to every group of its tree."""
        agent = self.agent
        if agent is None:
            return
        self.stopped = True
        self._remember_tree()
        if agent.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(agent.pid, signal.SIGTERM)
        deadline = time.time() + grace_s
        while time.time() < deadline and (
            agent.poll() is None or any(_proc_stat(pid) for pid in self.tree if pid != agent.pid)
        ):
            self._remember_tree()
            time.sleep(0.05)
        self._kill_groups()
        with contextlib.suppress(subprocess.TimeoutExpired):
            agent.wait(timeout=5)

    def _kill_groups(self) -> None:
        groups = {pgid for pgid, _ in self.tree.values()} | {self.agent.pid if self.agent else 0}
        for pgid in sorted(groups - {0}):
            leader = _proc_stat(pgid)
            known = self.tree.get(pgid)
            if leader is not None and known is not None and known[1] not in (-1, leader[2]):
                continue  # the id now belongs to another process: not ours
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)

    def close(self) -> None:
        super().close()
        if self.agent is not None and self.agent.poll() is None:
            self.terminate(grace_s=1.0)
        self._kill_groups()  # every path, the normal end included
        if self.fifo_dir is not None:
            shutil.rmtree(self.fifo_dir, ignore_errors=True)

    def diagnose(self) -> ErrorInfo | None:
        """Why the agent failed, read from its log (None: nothing specific; the caller falls back
        to the ranks' exit codes)."""
        code = self.agent.poll() if self.agent is not None else None
        if code in (None, 0) or self.log is None:
            return None
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return None
        started = any(isinstance(r.events, _EventReader) and r.events.seen for r in self.ranks)
        for sign, kind, template in _RUN_SIGNS if started else _JOIN_SIGNS:
            if sign in text:
                message = template.format(
                    name=self.name,
                    endpoint=self.endpoint,
                    rdzv_id=self.rdzv_id,
                    join=self.join_timeout_s,
                    n=self.nnodes,
                    k=self.node_rank,
                    last=self.nnodes - 1,
                )
                info = error_info(kind, f"{self.name}: {message}; log: {self.log}")
                lines = [line for line in text.splitlines() if sign in line or "Error" in line]
                info.traceback = "\n".join(lines[-8:]) or None
                return info
        return None


def start_node_launch(
    name: str,
    spec_path: Path,
    world: int,
    log_dir: Path,
    env: Mapping[str, str],
    nodes: NodeSpec,
    *,
    index: int,
    join_timeout_s: float,
) -> NodeLaunch:
    """Start torchrun for this node's share (``local_world``) of a ``world``-process launch."""
    host, port = parse_endpoint(nodes.rdzv_endpoint or "")
    port += index
    if port > 65535:
        raise RunFailure("BAD_REQUEST", f"{name}: rendezvous port {port} is above 65535")
    per = local_world(nodes, world)
    log_dir.mkdir(parents=True, exist_ok=True)
    fifo_dir = Path(tempfile.mkdtemp(prefix=f"cdit-{name}-node{nodes.node_rank}-"))
    endpoint = f"{host}:{port}"
    rdzv_id = f"{nodes.rdzv_id}-{name}"
    launch = NodeLaunch(
        name,
        fifo_dir=fifo_dir,
        log=log_dir / f"{name}.node{nodes.node_rank}.log",
        endpoint=endpoint,
        rdzv_id=rdzv_id,
        nnodes=nodes.nnodes,
        node_rank=nodes.node_rank,
    )
    launch.join_timeout_s = join_timeout_s
    # The import + load limit starts after the rendezvous; torchrun's own join timeout (plus its
    # start and exit) comes first, so a node that never joins is reported as such.
    launch.startup_grace_s = join_timeout_s + _AGENT_SLACK_S
    readers = _open_fifos(fifo_dir, per)
    agent_env = _agent_env(env, fifo_dir, nodes)
    timeout = max(1, int(join_timeout_s))
    command = torchrun_command(
        nodes, per, endpoint, rdzv_id, spec_path, timeout, [sys.executable, "-m"]
    )
    with open(launch.log, "ab") as sink:
        agent = subprocess.Popen(
            command,
            env=agent_env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=parent_watch(os.getpid()),  # dies with the controller, even mid-fork
        )
    launch.agent = agent
    launch.ranks = [
        Rank(nodes.node_rank * per + local, agent, reader, launch.log)
        for local, reader in enumerate(readers)
    ]
    return launch


def _open_fifos(fifo_dir: Path, per: int) -> list[_EventReader]:
    """One FIFO per local rank in ``fifo_dir``, opened for reading (non-blocking)."""
    readers = []
    for local in range(per):
        path = fifo_dir / f"rank{local}.fifo"
        os.mkfifo(path, 0o600)
        readers.append(_EventReader(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb"))
    return readers


def _agent_env(env: Mapping[str, str], fifo_dir: Path, nodes: NodeSpec) -> dict[str, str]:
    """The torchrun agent's environment: no enclosing job's ranks, this node's settings."""
    pythonpath = os.pathsep.join(p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH", "")) if p)
    agent_env = {k: v for k, v in env.items() if k not in _DIST_ENV}
    agent_env.update(
        {
            "PYTHONPATH": pythonpath,
            ENV_EVENT_DIR: str(fifo_dir),
            ENV_NNODES: str(nodes.nnodes),
            ENV_NODE_RANK: str(nodes.node_rank),
            "CDIT_SPAWN_TIME": repr(time.time()),
        }
    )
    return agent_env


def torchrun_command(
    nodes: NodeSpec,
    per: int,
    endpoint: str,
    rdzv_id: str,
    spec_path: Path | str,
    join_timeout_s: int,
    prefix: Sequence[str] = (),
) -> list[str]:
    """The torchrun command line of one node (``prefix`` ``python -m``: the same interpreter)."""
    head = [*prefix, "torch.distributed.run"] if prefix else ["torchrun"]
    conf = (
        f"is_host={1 if nodes.node_rank == 0 else 0},"
        f"join_timeout={join_timeout_s},read_timeout={join_timeout_s}"
    )
    return [
        *head,
        "--nnodes", str(nodes.nnodes),
        "--node-rank", str(nodes.node_rank),
        "--nproc-per-node", str(per),
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", endpoint,
        "--rdzv-id", rdzv_id,
        "--rdzv-conf", conf,
        "--max-restarts", "0",
        "-m", "cdit_runtime.worker", str(spec_path),
    ]  # fmt: skip
