"""One gloo rank of the 2-process context-parallel check of generated standalone modules (CPU).

Launched by `tests/test_codegen_e2e.py` as two plain processes with RANK / WORLD_SIZE /
MASTER_ADDR / MASTER_PORT set (as torchrun would; cache-dit's own CLI init cannot run on CPU)
through `tests/gloo_launch.py`, whose `run_cases` joins the process group and writes the results.

SPEC is a JSON file `{case_name: path of the generated module}`. For every case the rank builds
the same seeded tiny model as the single-process baseline (`e2e_models.py`), imports the
generated module from its path and calls its `enable(None, transformer=model,
parallelism_config=ParallelismConfig(ulysses_size=2))`: the module fills the CP plan itself.
Rank 0 writes `OUT/<case>.pt` (the output) or `OUT/<case>.err` (the traceback).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def run_case(name: str, module_path: str) -> Any:
    """One case on this rank: the tiny model through its generated module's `enable`, run once."""
    import e2e_models
    import torch
    from cache_dit import ParallelismConfig

    spec = importlib.util.spec_from_file_location(f"generated_{name}", module_path)
    assert spec is not None and spec.loader is not None
    generated = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generated)
    model, inputs = e2e_models.CASES[name].build()
    config = ParallelismConfig(ulysses_size=2, attention_backend="native")
    generated.enable(None, transformer=model, parallelism_config=config)
    with torch.no_grad():
        return e2e_models.output(model(**inputs))


def main(spec_path: str, out_dir: str) -> int:
    from tests.gloo_launch import run_cases

    return run_cases(spec_path, out_dir, run_case)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
