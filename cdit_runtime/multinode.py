"""Multi-node verification runs through torchrun's rendezvous.

Every node runs the same ``verify`` command with its own ``--node-rank``. Each node's controller
plans the same launches (the plan depends on the request only, nodes are assumed alike) and starts
every multi-process launch as

    torchrun --nnodes N --node-rank K --nproc-per-node P --rdzv-backend c10d
             --rdzv-endpoint HOST:PORT+i --rdzv-id ID-launch<i+1> --rdzv-conf is_host=...
             -m cdit_runtime.worker <outputDir>/launches/launch<i+1>.node<K>.json

(``i``: the launch's index; a run whose parallel phases have several world sizes has one launch
per world size, each on its own port so that one launch's store cannot be mistaken for the next
one's). Node 0 hosts the rendezvous store (``is_host``), so the endpoint must be node 0's address.

* **Ranks.** c10d rendezvous orders the nodes by host name and process id, not by
  ``--node-rank``; the worker therefore takes ``RANK = node_rank * P + LOCAL_RANK``
  (`join_nodes`), a permutation of torchrun's ranks that puts rank 0 on node 0. It is valid
  because the workers meet through the agent's shared store (``TORCHELASTIC_USE_AGENT_STORE``).
  Before the process group starts, every worker checks through that store that no two nodes claim
  the same node rank and that its launch (request, phases, generation settings, integration
  module bytes) is node 0's, then waits at a gate for all ranks: a node started with other flags
  makes every node fail at once, with the difference (node 0's results say it).
* **Events.** torchrun passes no file descriptors to its workers, so the controller makes one FIFO
  per local rank in a private temporary directory (``CDIT_EVENT_DIR``) and the worker's
  `worker.Channel` writes its JSON lines there.
* **Results.** Rank 0 (node 0) gathers every rank's record over gloo as on one node; only node 0's
  controller writes ``results.json``, the table and the verdicts. The others (`follower`) supervise
  their local ranks and exit 0 when all their launches ended cleanly.
* **Files.** No shared filesystem is assumed: a tiny model is built on every node, before the
  process group starts (a private build directory renamed into place, so nodes that do share the
  output directory do not collide); ``--model`` and ``--integration`` must exist at the same path
  on every node.
* **Ending.** Cancel, timeouts and failures end torchrun (SIGTERM, which stops its workers) and
  then SIGKILL every process group of the agent's tree; the workers also die with their agent
  (``PR_SET_PDEATHSIG``) and the agent with its controller. A rank that dies makes the ranks on
  the other nodes fail in their next collective (gloo sees the closed connection), so every node's
  launch ends. Multi-node launches are not relaunched (every node would have to restart together):
  the phases left unfinished fail with the launch's error.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .contract import ContractError, ErrorInfo, NodeSpec, VerificationRequest, from_json
from .errors import RunFailure, error_info
from .guard import parent_watch
from .launcher import _PACKAGE_PARENT, Launch, Rank, _die_with_parent
from .planning import (
    MIN_CPU_PROCESSES,
    LaunchPlan,
    cpu_cores,
    cpu_process_limit,
    plan_launches,
)

__all__ = [
    "NodeLaunch",
    "add_node_arguments",
    "apply_node_flags",
    "build_node_model",
    "check_nodes",
    "join_nodes",
    "local_world",
    "node_commands",
    "open_event_fifo",
    "parse_endpoint",
    "plan_for_nodes",
    "start_node_launch",
]

# Environment of a torchrun worker, set by the node's controller.
ENV_NNODES = "CDIT_NNODES"
ENV_NODE_RANK = "CDIT_NODE_RANK"
ENV_EVENT_DIR = "CDIT_EVENT_DIR"

_AGENT_SLACK_S = 60.0  # torchrun's start and exit around its join timeout
_LINGER_S = 60.0  # a rank that failed before the process group waits this long for the others
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.\-]+)$")
_RDZV_ID = re.compile(r"^[A-Za-z0-9_.\-]+$")
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


# ------------------------------------------------------------------------------ node settings


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) → (host, port); ContractError when malformed."""
    host, sep, port = endpoint.strip().rpartition(":")
    if not sep or not _HOST.match(host) or not port.isdigit() or not 0 < int(port) < 65536:
        raise ContractError(
            f"nodes.rdzvEndpoint {endpoint!r} is not HOST:PORT (node 0's address and a free port)"
        )
    return host, int(port)


def check_nodes(request: VerificationRequest) -> None:
    """Raise `ContractError` (one line) when the request's node settings cannot describe a run."""
    nodes = request.nodes
    if nodes.nnodes < 1:
        raise ContractError(f"nodes.nnodes must be >= 1 (got {nodes.nnodes})")
    if not 0 <= nodes.node_rank < nodes.nnodes:
        raise ContractError(
            f"nodes.nodeRank {nodes.node_rank} is outside 0..{nodes.nnodes - 1} "
            f"(nnodes {nodes.nnodes})"
        )
    if nodes.nproc_per_node is not None and nodes.nproc_per_node < 1:
        raise ContractError(f"nodes.nprocPerNode must be >= 1 (got {nodes.nproc_per_node})")
    if nodes.nnodes == 1:
        return
    if not nodes.rdzv_endpoint:
        raise ContractError(
            f"nnodes {nodes.nnodes} needs a rendezvous endpoint: --rdzv-endpoint HOST:PORT "
            "(node 0's address, reachable from every node)"
        )
    _, port = parse_endpoint(nodes.rdzv_endpoint)
    launches = len({p.world_size for p in request.phases if p.world_size > 1})
    if port + max(0, launches - 1) > 65535:
        raise ContractError(
            f"nodes.rdzvEndpoint: {launches} launches need ports {port}..{port + launches - 1}; "
            "choose a lower port"
        )
    if not _RDZV_ID.match(nodes.rdzv_id):
        raise ContractError(f"nodes.rdzvId {nodes.rdzv_id!r}: use letters, digits, '.', '_', '-'")


def local_world(nodes: NodeSpec, world: int) -> int:
    """Processes this node runs for a launch of ``world`` processes."""
    if nodes.nnodes <= 1 or world <= 1:
        return world
    return nodes.nproc_per_node or max(1, world // nodes.nnodes)


def _node_refusal(world: int, phase_id: str, nodes: NodeSpec, device: str, gpus: int) -> Any:
    n = nodes.nnodes
    if nodes.nproc_per_node is not None and world != n * nodes.nproc_per_node:
        return error_info(
            "BAD_REQUEST",
            f"{phase_id}: needs {world} processes, but {n} nodes x {nodes.nproc_per_node} "
            f"per node make {n * nodes.nproc_per_node}",
            hint="Give every parallel phase the size nnodes x nproc-per-node (--size), or leave "
            "--nproc-per-node out (then each phase runs world size / nnodes per node).",
        )
    if world % n:
        return error_info(
            "BAD_REQUEST",
            f"{phase_id}: {world} processes do not split evenly over {n} nodes",
            hint="Use a phase size that is a multiple of --nnodes.",
        )
    per = local_world(nodes, world)
    if device == "cuda" and per > gpus:
        return error_info(
            "MISSING_GPUS",
            f"{phase_id}: needs {per} GPUs on each of {n} nodes, {gpus} visible on node "
            f"{nodes.node_rank}",
        )
    return None


def plan_for_nodes(
    request: VerificationRequest, device: str, gpus: int
) -> tuple[list[LaunchPlan], dict[str, ErrorInfo]]:
    """`planning.plan_launches` for this request, over ``request.nodes`` when there are several.

    With several nodes, a multi-process phase is refused (as data) when its world size does not
    split into nnodes x nproc-per-node; the world-size checks of one host see the GPUs of all
    nodes (this node's count x nnodes: nodes are assumed alike). Single-process phases ride along
    in the first multi-node launch (on rank 0, which is on node 0, or on every rank), as on one
    node; with no multi-process phase at all they run on node 0 alone.
    """
    crowded = too_many_processes(request, device)
    if crowded:
        request = replace(request, phases=[p for p in request.phases if p.id not in crowded])
    launches, refused = _plan_for_nodes(request, device, gpus)
    refused.update(
        {
            phase_id: error_info(
                "BAD_REQUEST",
                message,
                hint="Lower the phase size (--size): on CPU every rank is a process on this host.",
            )
            for phase_id, message in crowded.items()
        }
    )
    return launches, refused


def too_many_processes(request: VerificationRequest, device: str) -> dict[str, str]:
    """Phases that would start more processes on this host than it runs for a CPU launch
    (`planning.cpu_process_limit`): phase id -> why. Nothing on GPUs, where a phase that
    needs more processes than visible devices is skipped by the planner."""
    if device != "cpu":
        return {}
    limit = cpu_process_limit()
    out = {}
    for spec in request.phases:
        local = local_world(request.nodes, spec.world_size)
        if local > limit:
            out[spec.id] = (
                f"{spec.id}: needs {local} processes on this host; a CPU run starts at most "
                f"{limit} here ({cpu_cores()} cores, never fewer than {MIN_CPU_PROCESSES})"
            )
    return out


def _plan_for_nodes(
    request: VerificationRequest, device: str, gpus: int
) -> tuple[list[LaunchPlan], dict[str, ErrorInfo]]:
    nodes = request.nodes
    if nodes.nnodes <= 1:
        return plan_launches(request, device, gpus)
    refused: dict[str, ErrorInfo] = {}
    kept = []
    for spec in request.phases:
        reason = (
            _node_refusal(spec.world_size, spec.id, nodes, device, gpus)
            if spec.world_size > 1
            else None
        )
        if reason is None:
            kept.append(spec)
        else:
            refused[spec.id] = reason
    launches, more = plan_launches(replace(request, phases=kept), device, gpus * nodes.nnodes)
    refused.update(more)
    return launches, refused


# ------------------------------------------------------------------------------- node launch

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
    readers = []
    for local in range(per):
        path = fifo_dir / f"rank{local}.fifo"
        os.mkfifo(path, 0o600)
        readers.append(_EventReader(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb"))
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


# ------------------------------------------------------------------------------- worker side


def open_event_fifo(env: Mapping[str, str]) -> int | None:
    """The write end of this local rank's FIFO (torchrun launches), or None."""
    folder = env.get(ENV_EVENT_DIR)
    if not folder:
        return None
    path = Path(folder) / f"rank{env.get('LOCAL_RANK', '0')}.fifo"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO: the controller is gone
    except OSError:
        return None
    os.set_blocking(fd, True)
    return fd


def _fingerprint(spec: Mapping[str, Any]) -> dict[str, str]:
    """What every node's launch must agree on, digested per part (paths may differ per node)."""
    request = json.loads(json.dumps(spec.get("request") or {}))
    for key in ("outputDir", "reference"):
        request.pop(key, None)
    (request.get("nodes") or {}).pop("nodeRank", None)
    module = b""
    integration = request.get("integration") or {}
    if integration.get("kind") == "standalone" and integration.get("path"):
        with contextlib.suppress(OSError):
            module = Path(integration.pop("path")).read_bytes()
    model = request.get("model") or {}
    model.pop("path", None)
    model.pop("sourceFiles", None)

    def digest(value: Any) -> str:
        data = value if isinstance(value, bytes) else json.dumps(value, sort_keys=True).encode()
        return hashlib.sha256(data).hexdigest()[:16]

    phases = request.pop("phases", None)
    return {
        "request flags": digest(request),
        "phases": digest([phases, spec.get("phases")]),
        "generation settings (steps, call arguments, device, dtype)": digest(
            [spec.get(k) for k in ("steps", "callKwargs", "device", "dtype")]
        ),
        "integration module": digest(module),
    }


def join_nodes(spec: Mapping[str, Any], env: MutableMapping[str, str] | None = None) -> None:
    """Before the process group of a multi-node launch: rank, checks, model, and a gate.

    1. ``RANK`` (and ``GROUP_RANK``/``ROLE_RANK``) becomes ``node_rank * LOCAL_WORLD_SIZE +
       LOCAL_RANK``, which puts rank 0 on node 0 (`remap_rank`);
    2. through the agent's store, this (node, local rank) slot is claimed and the launch compared
       with node 0's (`_check_with_node0`);
    3. a tiny model is built on this node (`build_node_model`);
    4. every rank waits at a store gate until all ranks passed 1-3. A rank that fails posts its
       error there, so every rank of every node fails at once with that error (rather than
       waiting in ``init_process_group`` for a rank that will never come).

    Raises `RunFailure` (``RENDEZVOUS``, or the posted error's code). No-op outside a multi-node
    launch (``CDIT_NNODES`` unset or 1).
    """
    env = os.environ if env is None else env
    if int(env.get(ENV_NNODES, "1")) <= 1:
        return
    _die_with_parent()  # torchrun is the parent: its workers end with it
    if not _parent_is_torchrun():
        raise RunFailure("WORKER_DIED", "the torchrun agent ended before this worker started")
    node, local, rank = remap_rank(env)
    limit = float((spec.get("request") or {}).get("launchTimeoutS", 900.0))
    world = int(env.get("WORLD_SIZE", "1"))
    gate = _Gate(env, limit)
    try:
        _check_with_node0(gate, spec, node, local, rank)
        build_node_model(spec, env)
    except Exception as exc:
        gate.fail(rank, node, world, exc)
        raise
    gate.pass_and_wait(world)


class _Gate:
    """The runtime's keys in the workers' store (``MASTER_ADDR:MASTER_PORT``) for one launch.

    torchrun hosts that store in the agent it made group rank 0 (any node: c10d orders nodes by
    host name and process id), so it lives as long as that node's launch; store errors are
    reported as such. A rank that fails posts its error and stays until the others have read it
    (at most `_LINGER_S`), so that every node reports the cause, not a lost connection.
    """

    def __init__(self, env: Mapping[str, str], limit_s: float, store: Any = None) -> None:
        import datetime

        from torch.distributed import TCPStore

        self.limit_s = limit_s
        self.store = store or TCPStore(
            env["MASTER_ADDR"],
            int(env["MASTER_PORT"]),
            is_master=False,
            timeout=datetime.timedelta(seconds=limit_s),
        )
        run = env.get("TORCHELASTIC_RUN_ID", "")
        self.prefix = f"cdit/{run}/{env.get('TORCHELASTIC_RESTART_COUNT', 0)}"

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}"

    def claim(self, name: str) -> bool:
        """True for the first process that claims ``name``."""
        return int(self.store.add(self.key(name), 1)) == 1

    def set(self, name: str, value: str) -> None:
        self.store.set(self.key(name), value)

    def fail(self, rank: int, node: int, world: int, exc: BaseException) -> None:
        """Post this rank's error for every rank (the first error wins); wait until they read it."""
        from .errors import classify

        info = classify(exc)
        message = f"rank {rank} on node {node}: {info.message}"
        with contextlib.suppress(Exception):
            if not self.claim("failed"):
                self.store.add(self.key("seen"), 1)  # another rank's error is the one reported
                return
            self.set("failure", json.dumps({"code": info.code, "message": message}))
            deadline = time.time() + min(self.limit_s, _LINGER_S)
            while int(self.store.add(self.key("seen"), 0)) < world - 1:
                if time.time() > deadline:
                    break
                time.sleep(0.1)

    def _raise_posted(self) -> None:
        if self.store.check([self.key("failure")]):
            posted = json.loads(self.store.get(self.key("failure")))
            self.store.add(self.key("seen"), 1)
            raise RunFailure(posted["code"], posted["message"])

    def _poll(self, done: Callable[[], bool], timeout_message: Callable[[], str]) -> None:
        deadline = time.time() + self.limit_s
        try:
            while not done():
                self._raise_posted()
                if time.time() > deadline:
                    raise RunFailure("RENDEZVOUS", timeout_message())
                time.sleep(0.1)
            self._raise_posted()
        except RunFailure:
            raise
        except Exception as exc:  # the store went away with the node that hosted it
            raise RunFailure(
                "RENDEZVOUS",
                "lost the workers' store (hosted by one node's torchrun) before the process "
                f"group started: another node's launch stopped, see its output ({exc})",
            ) from exc

    def wait(self, name: str, what: str) -> str:
        """The value of ``name`` once set; a failure another rank posted is raised here."""
        self._poll(
            lambda: bool(self.store.check([self.key(name)])),
            lambda: f"{what} within {self.limit_s:.0f} s",
        )
        return str(self.store.get(self.key(name)).decode())

    def pass_and_wait(self, world: int) -> None:
        """Count this rank in; wait until every rank is in (or one posted a failure)."""
        self.store.add(self.key("passed"), 1)
        self._poll(
            lambda: int(self.store.add(self.key("passed"), 0)) >= world,
            lambda: (
                f"only {int(self.store.add(self.key('passed'), 0))} of {world} ranks were ready "
                f"within {self.limit_s:.0f} s (a worker on a node died before it started: see "
                "the other nodes' output)"
            ),
        )


def remap_rank(env: MutableMapping[str, str]) -> tuple[int, int, int]:
    """Set ``RANK`` = node rank x local world + local rank (torchrun's env); (node, local, rank)."""
    nnodes = int(env.get(ENV_NNODES, "1"))
    node = int(env[ENV_NODE_RANK])
    local = int(env.get("LOCAL_RANK", "0"))
    per = int(env.get("LOCAL_WORLD_SIZE", "1"))
    world = int(env.get("WORLD_SIZE", "1"))
    if world != nnodes * per:
        raise RunFailure(
            "RENDEZVOUS",
            f"torchrun formed a world of {world} processes, expected {nnodes} nodes x {per}: "
            "every node must run the same request (same phases, sizes and --nproc-per-node)",
        )
    if env.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        raise RunFailure(
            "RENDEZVOUS",
            "torchrun did not share its rendezvous store with the workers "
            "(TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1?); multi-node runs need it to put rank 0 on "
            "node 0",
        )
    rank = node * per + local
    env["RANK"] = str(rank)
    env["GROUP_RANK"] = str(node)
    env["ROLE_RANK"] = str(rank)
    return node, local, rank


def _parent_is_torchrun() -> bool:
    """False when this worker was orphaned before it could arm its death signal (Linux)."""
    try:
        command = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc: nothing to check
    return b"torch.distributed.run" in command or b"torchrun" in command


def _check_with_node0(
    gate: _Gate, spec: Mapping[str, Any], node: int, local: int, rank: int
) -> None:
    """Claim this (node, local rank) slot; compare this launch with node 0's (`_fingerprint`)."""
    if not gate.claim(f"slot/{node}/{local}"):
        nnodes = int((spec.get("request") or {}).get("nodes", {}).get("nnodes", 1))
        raise RunFailure(
            "RENDEZVOUS",
            f"two nodes were started with --node-rank {node}: give every node its own rank "
            f'0..{nnodes - 1} (with Slurm: --node-rank "$SLURM_NODEID")',
        )
    mine = _fingerprint(spec)
    if rank == 0:
        gate.set("fingerprint", json.dumps(mine))
        return
    theirs = json.loads(
        gate.wait("fingerprint", "node 0 did not describe its launch (is one node started with "
                  "--node-rank 0?)")
    )  # fmt: skip
    differs = [part for part, value in mine.items() if theirs.get(part) != value]
    if differs:
        raise RunFailure(
            "RENDEZVOUS",
            f"node {node} was started with a different request than node 0: it differs in "
            f"{', '.join(differs)}; run the same verify command on every node (only --node-rank "
            "and --out may differ)",
        )


def build_node_model(spec: Mapping[str, Any], env: Mapping[str, str] | None = None) -> None:
    """Multi-node tiny runs: local rank 0 of every node builds the tiny pipeline, before the group.

    No shared filesystem is assumed, so every node needs its own copy (the build is seeded and
    deterministic on CPU). It runs before ``init_process_group`` because transformers' and
    diffusers' ``save_pretrained`` write weights on distributed rank 0 only; the other ranks wait
    for it at the gate of `join_nodes`. The build goes to a private directory renamed into place,
    so nodes that do share the output directory do not write it at the same time.
    """
    env = os.environ if env is None else env
    if int(env.get(ENV_NNODES, "1")) <= 1 or int(env.get("LOCAL_RANK", "0")) != 0:
        return
    request: VerificationRequest = from_json(VerificationRequest, spec["request"])
    source = request.model
    if source.source != "tiny":
        return
    from .loading import model_dir
    from .tiny_pipelines import ensure_tiny

    path = model_dir(source, request.output_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        if not path.exists() or not any(path.iterdir()):
            ensure_tiny(source.family or "", staging)
            with contextlib.suppress(OSError):  # another node sharing the directory was first
                os.replace(staging, path)
        ensure_tiny(source.family or "", path)  # no-op when complete (rebuilds a stale one)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# ------------------------------------------------------------------------------------- CLI


def add_node_arguments(parser: argparse.ArgumentParser) -> None:
    """The multi-node flags of ``verify``, in their own group."""
    group = parser.add_argument_group(
        "multi-node (torchrun rendezvous: the same command on every node; docs/multi-node.md)"
    )
    group.add_argument("--nnodes", type=int, metavar="N", help="nodes taking part (default 1)")
    group.add_argument(
        "--node-rank", type=int, metavar="K", help="this node (0: rendezvous host, writes results)"
    )
    group.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="node 0's address and a port")
    group.add_argument("--rdzv-id", metavar="ID", help="run id shared by the nodes (cdit-verify)")
    group.add_argument(
        "--nproc-per-node", type=int, metavar="P", help="processes per node (world size / N)"
    )
    group.add_argument(
        "--print-node-command",
        action="store_true",
        help="print the verify command of every node (and the torchrun it starts) and exit",
    )


def apply_node_flags(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """Put the multi-node flags into the request document (over the file's ``nodes``)."""
    nodes = data.get("nodes") or {}
    if not isinstance(nodes, dict):
        raise ValueError("nodes: expected an object")
    nodes = dict(nodes)
    for attr, key in (
        ("nnodes", "nnodes"),
        ("node_rank", "nodeRank"),
        ("rdzv_endpoint", "rdzvEndpoint"),
        ("rdzv_id", "rdzvId"),
        ("nproc_per_node", "nprocPerNode"),
    ):
        value = getattr(args, attr, None)
        if value is not None:
            nodes[key] = value
    if nodes:
        data["nodes"] = nodes


def _verify_tokens(argv: Sequence[str]) -> list[str]:
    """The arguments after ``verify`` without the node-specific ones."""
    tokens = list(argv)
    if "verify" in tokens:
        tokens = tokens[tokens.index("verify") + 1 :]
    out: list[str] = []
    skip = False
    for token in tokens:
        if skip:
            skip = False
        elif token in ("--node-rank", "--node_rank"):
            skip = True
        elif token.startswith(("--node-rank=", "--node_rank=")) or token == "--print-node-command":
            continue
        else:
            out.append(token)
    return out


def node_commands(
    request: VerificationRequest, argv: Sequence[str], cwd: str, python: str = sys.executable
) -> str:
    """The ``verify`` command of every node, a Slurm form, and the torchrun each one starts."""
    nodes = request.nodes
    tokens = _verify_tokens(argv)
    if not any(t == "--out" or t.startswith("--out=") for t in tokens):
        tokens += ["--out", request.output_dir]
    command = shlex.join([python, "-m", "cdit_runtime", "verify", *tokens])
    base = f"cd {shlex.quote(cwd)} && {command}"
    lines = [f"# {nodes.nnodes} nodes, rendezvous at {nodes.rdzv_endpoint} (node 0 hosts it)"]
    for k in range(nodes.nnodes):
        role = "writes results.json" if k == 0 else "runs its ranks, exits with their status"
        lines += [f"# node {k}: {role}", f"{base} --node-rank {k}"]
    lines += [
        "# Slurm, one task per node (srun --ntasks-per-node=1):",
        f'{base} --node-rank "$SLURM_NODEID"',
    ]
    worlds = sorted({p.world_size for p in request.phases if p.world_size > 1})
    if worlds:
        host, port = parse_endpoint(nodes.rdzv_endpoint or "")
        lines.append("# each node's verify starts, per launch (K: its --node-rank):")
        for i, world in enumerate(worlds):
            name = f"launch{i + 1}"
            spec = Path(request.output_dir) / "launches" / f"{name}.nodeK.json"
            command = torchrun_command(
                replace(nodes, node_rank=0),
                local_world(nodes, world),
                f"{host}:{port + i}",
                f"{nodes.rdzv_id}-{name}",
                spec,
                int(request.launch_timeout_s),
            )
            text = shlex.join(command).replace("--node-rank 0", "--node-rank K")
            lines.append(f"#   {text}   (is_host=0 on nodes K > 0)")
    else:
        lines.append("# no multi-process phase: node 0 runs every phase alone")
    return "\n".join(lines) + "\n"
