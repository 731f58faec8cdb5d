"""FIXTURE: the Flux standalone module with one fault injected, chosen by ``CDIT_FAULT``.

* ``spawn-child``: importing the module starts ``sleep 300`` (as an integration might start a
  helper process) and writes its pid to ``$CDIT_FAULT_DIR/child.rank<RANK>.pid``;
* ``kill-rank1``: ``enable`` with a parallelism config kills rank 1 with SIGKILL;
* ``nan``: ``enable`` with a cache config makes the transformer's output NaN;
* ``jitter``: importing the module makes the transformer class add a little fresh noise to
  every output (drawn from a generator the pipeline's seed does not reach), as a GPU kernel
  with nondeterministic reductions would: the pipeline no longer reproduces itself.

Anything else: the Flux module unchanged. The tests in ``test_runtime_faults.py`` set these
variables in the environment of ``verify``, which its workers inherit.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from flux_standalone import CP_PLAN_JSON, TRANSFORMER_CLASS, block_adapter, cp_plan
from flux_standalone import enable as _enable

__all__ = ["CP_PLAN_JSON", "TRANSFORMER_CLASS", "block_adapter", "cp_plan", "enable"]

FAULT = os.environ.get("CDIT_FAULT", "")

if FAULT == "spawn-child":
    _child = subprocess.Popen(["sleep", "300"])
    _marker = Path(os.environ["CDIT_FAULT_DIR"]) / f"child.rank{os.environ.get('RANK', '0')}.pid"
    _marker.write_text(str(_child.pid))


def _jittered(forward: Any) -> Any:
    import torch

    noise = torch.Generator().manual_seed(os.getpid())

    def jittered(self: Any, *args: Any, **kwargs: Any) -> Any:
        output = forward(self, *args, **kwargs)
        sample = output[0] if isinstance(output, tuple) else output.sample
        wobble = torch.randn(sample.shape, generator=noise).to(sample) * 3e-3
        if isinstance(output, tuple):
            return (sample + wobble, *output[1:])
        output.sample = sample + wobble
        return output

    return jittered


if FAULT == "jitter":
    from diffusers import FluxTransformer2DModel

    FluxTransformer2DModel.forward = _jittered(FluxTransformer2DModel.forward)


def _poison(_module: Any, _args: Any, output: Any) -> Any:
    if isinstance(output, tuple):
        return (output[0] * float("nan"), *output[1:])
    output.sample = output.sample * float("nan")
    return output


def enable(
    pipe: Any,
    *,
    cache_config: Any = None,
    parallelism_config: Any = None,
    transformer: Any = None,
) -> Any:
    if FAULT == "kill-rank1" and parallelism_config is not None and os.environ["RANK"] == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    result = _enable(
        pipe,
        cache_config=cache_config,
        parallelism_config=parallelism_config,
        transformer=transformer,
    )
    if FAULT == "nan" and cache_config is not None:
        (transformer or pipe.transformer).register_forward_hook(_poison)
    return result
