"""Multi-node command line: the ``verify`` flags of a node, and every node's command.

Standard library only (the ``verify`` parser is built from here). See `multinode`.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .contract import VerificationRequest
from .multinode_launch import torchrun_command
from .multinode_plan import local_world, parse_endpoint

__all__ = ["add_node_arguments", "apply_node_flags", "node_commands"]


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
