"""One gloo rank of the 2-process context-parallel check (CPU).

Launched by `tests/test_cp_plans_gloo.py` as two plain processes with RANK / WORLD_SIZE /
MASTER_ADDR / MASTER_PORT set (what torchrun would set; `torchrun --nproc_per_node=2
tests/cp_gloo/worker.py SPEC OUT` works as well). cache-dit's own CLI init cannot run on CPU, so the
process group is initialised here with gloo.

SPEC is a JSON file `{case_name: analyzer_cp_plan_json | {"module": generated_module_path}}`
(a generated module runs under ring attention instead of Ulysses with `"ring": true`)
(a case name may carry a `__variant` suffix: the same model, another module). For every case
the rank builds the same tiny seeded model as the single-process baseline, applies the plan through
`cache_dit.enable_cache(model, cache_config=None, parallelism_config=ParallelismConfig(
ulysses_size=2, cp_plan=to_cache_dit_plan(...)))` and runs it once. Rank 0 writes
`OUT/<case>.pt` (the output) or `OUT/<case>.err` (the traceback); a failing case does not stop
the others.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))  # the repository root, for `cdit_runtime`
sys.path.insert(0, str(HERE.parent))  # tests/, as under pytest: fixture modules by that name


def run_case(name: str, plan_json: dict[str, Any]) -> Any:
    """Build the case's model, apply its plan (or its generated module) and run it once."""
    import cache_dit
    import cp_cases  # tests/cp_gloo/cp_cases.py
    import torch
    from cache_dit import ParallelismConfig

    from tests.cp_plan_json import to_cache_dit_plan
    from tests.module_loading import load_module

    model, inputs = cp_cases.CASES[name.split("__")[0]].build()
    if "module" in plan_json:  # a generated standalone module: its enable() does it all
        path = Path(plan_json["module"])
        generated = load_module(path.stem, path)
        size = {"ring_size": 2} if plan_json.get("ring") else {"ulysses_size": 2}
        if plan_json.get("tp"):  # the module's TP planner, through cache-dit
            size = {"tp_size": 2}
        config = ParallelismConfig(**size, attention_backend="native")
        generated.enable(None, parallelism_config=config, transformer=model)
    else:
        cp_plan = to_cache_dit_plan(plan_json, model)
        config = ParallelismConfig(ulysses_size=2, cp_plan=cp_plan, attention_backend="native")
        model = cache_dit.enable_cache(model, cache_config=None, parallelism_config=config)
    with torch.no_grad():
        result = model(**inputs)
    if isinstance(result, torch.Tensor):
        return result
    return result[0] if isinstance(result, (tuple, list)) else result.sample


def main(spec_path: str, out_dir: str) -> int:
    from cdit_runtime.cpu_patches import apply_cpu_patches
    from tests.gloo_launch import run_cases

    apply_cpu_patches()  # ring attention's LSE step on CPU (what the runtime's workers do)
    return run_cases(spec_path, out_dir, run_case)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
