"""One gloo rank of the 2-process tensor-parallel check of `shard_div_attr` choices (CPU).

Launched by `tests/test_tp_shard_attrs.py` as two plain processes with RANK / WORLD_SIZE /
MASTER_ADDR / MASTER_PORT set (what torchrun would set) through `tests/gloo_launch.py`, whose
`run_cases` joins the process group and writes the results. SPEC is a JSON file
`{case: {"file", "class", "layers": {"<list>.*.<path>": style}, "shardDivAttrs": [...]}}` or
`{case: {"file", "class", "planner": "<generated integration module>"}}`. For every
case the rank builds the fixture model with the same seed as the single-process baseline
(`build` below), divides the listed attributes by the TP size (what cache-dit's `shard_div_attr`
does), parallelizes each block with PyTorch's `parallelize_module` and the listed styles (or
calls the generated planner's `parallelize_transformer`), and runs it once. Rank 0 writes
`OUT/<case>.pt` (the output) or `OUT/<case>.err` (the traceback); a failing case does not stop
the others.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from typing import Any

# fixtures that import their package (`from fixtures.models...`) and the generated modules
# importing them resolve from tests/
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SEED = 0
TOKENS = 6


def build(file: str, class_name: str) -> tuple[Any, Any]:
    """The seeded fixture model (default config) and its inputs: a tuple of positional
    arguments when the fixture module defines `example_inputs(model, generator)`, else one
    `(1, TOKENS, channels)` tensor."""
    import torch

    spec = importlib.util.spec_from_file_location(f"tp_fixture_{class_name}", file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    torch.manual_seed(SEED)
    model = getattr(module, class_name)().eval()
    example = getattr(module, "example_inputs", None)
    if example is not None:
        return model, tuple(example(model, torch.Generator().manual_seed(SEED + 1)))
    channels = next(model.parameters()).shape[1]
    x = torch.randn(1, TOKENS, channels, generator=torch.Generator().manual_seed(SEED + 1))
    return model, x


def _styles() -> dict[str, Any]:
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {
        "colwise": lambda: ColwiseParallel(),
        "rowwise": lambda: RowwiseParallel(),
        "colwise_replicate": lambda: ColwiseParallel(output_layouts=Replicate()),
        "rowwise_replicate_input": lambda: RowwiseParallel(input_layouts=Replicate()),
    }


def apply(model: Any, case: dict[str, Any], mesh: Any, tp_size: int) -> None:
    from torch.distributed.tensor.parallel import parallelize_module

    styles = _styles()
    lists: dict[str, dict[str, Any]] = {}
    for key, style in case["layers"].items():
        head, _, path = key.partition(".*.")
        lists.setdefault(head, {})[path] = style
    divided: dict[str, list[str]] = {}
    for key in case["shardDivAttrs"]:
        head, _, path = key.partition(".*.")
        divided.setdefault(head, []).append(path)
    for head in sorted(set(lists) | set(divided)):
        for block in getattr(model, head):
            for path in divided.get(head, []):
                owner_path, _, attr = path.rpartition(".")
                owner = block.get_submodule(owner_path) if owner_path else block
                value = getattr(owner, attr)
                assert value % tp_size == 0, f"{path} = {value} not divisible by {tp_size}"
                setattr(owner, attr, value // tp_size)
            plan = {path: styles[style]() for path, style in lists.get(head, {}).items()}
            parallelize_module(block, mesh, plan)


def apply_generated(model: Any, module_path: str) -> Any:
    """Parallelize with the TP planner class of a generated integration module, untouched."""
    spec = importlib.util.spec_from_file_location("tp_generated_integration", module_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    (planner,) = [
        value
        for name, value in vars(module).items()
        if name.endswith("TensorParallelismPlanner")
        and getattr(value, "__module__", "") == spec.name
    ]
    return planner


def run_case(name: str, case: dict[str, Any]) -> Any:
    """One case on this rank: the model, parallelized as the case says, run once."""
    import torch
    import torch.distributed as dist

    mesh = _mesh()
    model, x = build(case["file"], case["class"])
    if "planner" in case:
        apply_generated(model, case["planner"])().parallelize_transformer(
            transformer=model, tp_mesh=mesh
        )
    else:
        apply(model, case, mesh, dist.get_world_size())
    with torch.no_grad():
        out = model(*x) if isinstance(x, tuple) else model(x)
    if isinstance(out, dict):  # `{"sample": ...}`: the first entry
        return next(iter(out.values()))
    return out[0] if isinstance(out, tuple | list) else out


@functools.cache
def _mesh() -> Any:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (dist.get_world_size(),))


def main(spec_path: str, out_dir: str) -> int:
    # the fixture's other importable name (see tests/redteam_cp_worker.py), rank processes only
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "models"))
    from tests.gloo_launch import run_cases

    return run_cases(spec_path, out_dir, run_case)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
