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

import datetime
import json
import os
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))  # the repository root, for `cdit_runtime`


def main(spec_path: str, out_dir: str) -> int:
    import cp_cases  # tests/cp_gloo/cp_cases.py
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.setdefault("CACHE_DIT_LOG_LEVEL", "warning")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    out = Path(out_dir)
    plans: dict[str, dict] = json.loads(Path(spec_path).read_text())

    import cache_dit
    from cache_dit import ParallelismConfig

    from cdit_runtime.cpu_patches import apply_cpu_patches

    apply_cpu_patches()  # ring attention's LSE step on CPU (what the runtime's workers do)

    from tests.cp_plan_json import to_cache_dit_plan
    from tests.module_loading import load_module

    for name, plan_json in plans.items():
        try:
            model, inputs = cp_cases.CASES[name.split("__")[0]].build()
            if "module" in plan_json:  # a generated standalone module: its enable() does it all
                path = Path(plan_json["module"])
                generated = load_module(path.stem, path)
                size = {"ring_size": 2} if plan_json.get("ring") else {"ulysses_size": 2}
                config = ParallelismConfig(**size, attention_backend="native")
                generated.enable(None, parallelism_config=config, transformer=model)
            else:
                cp_plan = to_cache_dit_plan(plan_json, model)
                config = ParallelismConfig(
                    ulysses_size=2, cp_plan=cp_plan, attention_backend="native"
                )
                model = cache_dit.enable_cache(model, cache_config=None, parallelism_config=config)
            with torch.no_grad():
                result = model(**inputs)
            if isinstance(result, torch.Tensor):
                tensor = result
            else:
                tensor = result[0] if isinstance(result, (tuple, list)) else result.sample
            if rank == 0:
                torch.save(tensor.detach().clone(), out / f"{name}.pt")
        except Exception:
            if rank == 0:
                (out / f"{name}.err").write_text(traceback.format_exc())
            else:
                traceback.print_exc()
        dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
