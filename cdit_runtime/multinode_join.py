"""Multi-node launches, worker side: before the process group starts (`join_nodes`).

Each worker of a torchrun launch takes its rank (rank 0 on node 0), checks through the agent's
store that its node is the only one with its node rank and that its launch is node 0's, builds a
tiny model on its node and waits at a gate for every rank. Its events go to the FIFO the node's
controller made (`open_event_fifo`). See `multinode`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from .contract import VerificationRequest, from_json
from .errors import RunFailure
from .launcher import _die_with_parent
from .multinode_launch import ENV_EVENT_DIR, ENV_NNODES, ENV_NODE_RANK

__all__ = ["build_node_model", "join_nodes", "open_event_fifo", "remap_rank"]

_LINGER_S = 60.0  # a rank that failed before the process group waits this long for the others


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
