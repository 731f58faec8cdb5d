"""One gloo rank running a generated standalone module on a third-party fixture (CPU).

Launched by `tests/test_redteam_shapes.py` through `tests/gloo_launch.run_two_ranks`: SPEC maps
a case name to `{"module": generated module path, "fixture": fixture path, "cls": class}`; each
rank builds the class seeded with the fixture's `example_inputs` (`cp_cases._third_party`), runs
the module's `enable()` under Ulysses (2 ranks, native attention; Ring with `"ring": true`,
Ulysses Anything Attention with `"uaa": true`) and the model once.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "cp_gloo"))
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))


def build(fixture: str, cls: str) -> tuple[Any, dict[str, Any]]:
    """The seeded model and its inputs by name (what the single-process baseline runs too)."""
    import cp_cases  # tests/cp_gloo/cp_cases.py

    return cp_cases._third_party(fixture, cls)


def run_case(name: str, spec: dict[str, Any]) -> Any:
    import torch
    from cache_dit import ParallelismConfig

    from tests.module_loading import load_module

    model, inputs = build(spec["fixture"], spec["cls"])
    path = Path(spec["module"])
    generated = load_module(f"{path.stem}_{name}", path)
    degree: dict[str, Any] = {"ring_size": 2} if spec.get("ring") else {"ulysses_size": 2}
    if spec.get("uaa"):
        degree["ulysses_anything"] = True
    config = ParallelismConfig(**degree, attention_backend="native")
    generated.enable(None, parallelism_config=config, transformer=model)
    with torch.no_grad():
        return first_tensor(model(**inputs))


def first_tensor(output: Any) -> Any:
    """The output, or its first element when the model returns a tuple (the denoised stream
    first, auxiliary values after) or a dict (`{"sample": ...}`)."""
    if isinstance(output, dict):
        return next(iter(output.values()))
    return output[0] if isinstance(output, tuple | list) else output


def main(spec_path: str, out_dir: str) -> int:
    # a generated module names its fixture by the shortest name the generating process could
    # import it under (`fixtures.models...`, or `third_party...` when a test had
    # tests/fixtures/models on its path): both resolve in the rank processes
    sys.path.insert(0, str(REPO / "tests" / "fixtures" / "models"))
    from cdit_runtime.cpu_patches import apply_cpu_patches
    from tests.gloo_launch import run_cases

    apply_cpu_patches()
    return run_cases(spec_path, out_dir, run_case)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
