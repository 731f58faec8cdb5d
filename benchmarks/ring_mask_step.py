"""Check the masked ring step the generated modules carry, on the device at hand.

The generated `_masked_attention_lse` (lsp_server/codegen/render_ring_masks.py) computes one ring
step's attention and log-sum-exp under a mask: the memory-efficient kernel on CUDA, exact math
otherwise. This script renders it, then for bool and additive masks (with query rows whose keys
are all masked) checks, against `scaled_dot_product_attention` over the whole key range:

* one shard: the output of every row with a visible key, and the LSE against `logsumexp`;
* two shards merged with cache-dit's ring merge formula: the full attention.

    python benchmarks/ring_mask_step.py            # CPU: the math path
    python benchmarks/ring_mask_step.py --device cuda --dtype bfloat16
    python benchmarks/ring_mask_step.py --write-code step.py   # for a machine without libcst,
    python benchmarks/ring_mask_step.py --code step.py --device cuda       # then there

Prints one line per case and exits non-zero when a difference exceeds the dtype's tolerance.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _step_function(code_path: str | None) -> Any:
    import torch

    if code_path:  # rendered elsewhere (a machine without libcst): --write-code, then --code
        code = Path(code_path).read_text()
    else:
        from lsp_server.codegen.render_ring_masks import ring_masks_code

        code = ring_masks_code(99)
    namespace: dict[str, Any] = {}
    header = "from __future__ import annotations\nfrom typing import Any\nimport torch\n"
    exec(compile(header + code, "generated", "exec"), namespace)
    assert namespace["torch"] is torch
    return namespace["_masked_attention_lse"]


def _merge(out0: Any, lse0: Any, out1: Any, lse1: Any) -> Any:
    import torch.nn.functional as F

    out0, lse0, out1, lse1 = (t.float() for t in (out0, lse0, out1, lse1))
    return out0 - F.sigmoid(lse1 - lse0) * (out0 - out1)  # cache-dit's ring merge


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--code", help="read the rendered step code from this file")
    parser.add_argument("--write-code", help="write the rendered step code here and stop")
    args = parser.parse_args()
    if args.write_code:
        from lsp_server.codegen.render_ring_masks import ring_masks_code

        Path(args.write_code).write_text(ring_masks_code(99))
        return 0
    import torch

    step = _step_function(args.code)
    dtype = getattr(torch, args.dtype)
    tolerance = 1e-4 if dtype == torch.float32 else 2e-2
    g = torch.Generator().manual_seed(0)
    failed = False
    for batch, heads, seq, dim, kind in [
        (1, 4, 64, 32, "bool"),
        (2, 8, 256, 64, "additive"),
        (1, 24, 2048, 128, "bool"),
    ]:
        half = seq // 2
        q, k, v = (
            torch.randn(batch, seq, heads, dim, generator=g).to(args.device, dtype)
            for _ in range(3)
        )
        segments = torch.randint(0, 3, (batch, seq), generator=g).sort(dim=1).values
        visible = (segments[:, :, None] == segments[:, None, :])[:, None].to(args.device)
        mask = visible if kind == "bool" else torch.where(visible, 0.0, float("-inf"))
        mask = mask.to(dtype) if kind != "bool" else mask
        reference = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask
        ).transpose(1, 2)
        rows = slice(0, half)
        start = time.perf_counter()
        shards = [
            step(q[:, rows], k[:, cols], v[:, cols], mask[..., rows, cols], None)
            for cols in (slice(0, half), slice(half, seq))
        ]
        if args.device == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        merged = _merge(shards[0][0], shards[0][1], shards[1][0], shards[1][1])
        diff = (merged - reference[:, rows].float()).abs().max().item()
        any_empty = bool((~visible[..., rows, half:].any(-1)).any())
        print(
            f"{args.device} {args.dtype} b{batch} h{heads} s{seq} d{dim} {kind}: merged max diff "
            f"{diff:.2e} (shards with every key masked: {any_empty}); two steps "
            f"{elapsed * 1e3:.1f} ms"
        )
        failed |= not diff <= tolerance
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
