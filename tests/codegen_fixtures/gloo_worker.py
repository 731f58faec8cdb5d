"""One gloo rank of the 2-process context-parallel check of generated standalone modules (CPU).

Launched by `tests/test_codegen_e2e.py` as two plain processes with RANK / WORLD_SIZE /
MASTER_ADDR / MASTER_PORT set (as torchrun would; cache-dit's own CLI init cannot run on CPU).

SPEC is a JSON file `{case_name: path of the generated module}`. For every case the rank builds
the same seeded tiny model as the single-process baseline (`e2e_models.py`), imports the
generated module from its path and calls its `enable(None, transformer=model,
parallelism_config=ParallelismConfig(ulysses_size=2))`: the module fills the CP plan itself.
Rank 0 writes `OUT/<case>.pt` (the output) or `OUT/<case>.err` (the traceback).
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main(spec_path: str, out_dir: str) -> int:
    import e2e_models
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.setdefault("CACHE_DIT_LOG_LEVEL", "error")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    out = Path(out_dir)
    modules: dict[str, str] = json.loads(Path(spec_path).read_text())

    from cache_dit import ParallelismConfig

    for name, module_path in modules.items():
        try:
            spec = importlib.util.spec_from_file_location(f"generated_{name}", module_path)
            assert spec is not None and spec.loader is not None
            generated = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(generated)
            model, inputs = e2e_models.CASES[name].build()
            config = ParallelismConfig(ulysses_size=2, attention_backend="native")
            generated.enable(None, transformer=model, parallelism_config=config)
            with torch.no_grad():
                result = e2e_models.output(model(**inputs))
            if rank == 0:
                torch.save(result.detach().clone(), out / f"{name}.pt")
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
