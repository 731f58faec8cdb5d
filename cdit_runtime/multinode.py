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

The code is split by side: `multinode_plan` (node settings, planning), `multinode_launch` (the
controller's torchrun agent), `multinode_join` (the worker before its process group) and
`multinode_cli` (flags and every node's command); the public names stay importable from here.
"""

from __future__ import annotations

from .multinode_cli import add_node_arguments, apply_node_flags, node_commands
from .multinode_join import build_node_model, join_nodes, open_event_fifo, remap_rank
from .multinode_launch import (
    ENV_EVENT_DIR,
    ENV_NNODES,
    ENV_NODE_RANK,
    NodeLaunch,
    start_node_launch,
    torchrun_command,
)
from .multinode_plan import (
    check_nodes,
    local_world,
    parse_endpoint,
    plan_for_nodes,
    too_many_processes,
)

__all__ = [
    "ENV_EVENT_DIR",
    "ENV_NNODES",
    "ENV_NODE_RANK",
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
    "remap_rank",
    "start_node_launch",
    "too_many_processes",
    "torchrun_command",
]
