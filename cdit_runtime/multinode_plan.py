"""Multi-node planning: the node settings of a request, and the launches of this node.

Every node plans the same launches from the request alone (nodes are assumed alike); a
multi-process phase whose world size does not split over the nodes is refused as data. See
`multinode` for how a multi-node run works.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from .contract import ContractError, ErrorInfo, NodeSpec, VerificationRequest
from .errors import error_info
from .planning import (
    MIN_CPU_PROCESSES,
    LaunchPlan,
    cpu_cores,
    cpu_process_limit,
    plan_launches,
)

__all__ = ["check_nodes", "local_world", "parse_endpoint", "plan_for_nodes", "too_many_processes"]

_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.\-]+)$")
_RDZV_ID = re.compile(r"^[A-Za-z0-9_.\-]+$")


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
