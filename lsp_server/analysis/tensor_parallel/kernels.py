"""DTensor-unsafe fused kernels: env-gated CUDA/Triton kernels crash or corrupt the output when
their inputs are sharded. Found from the block's data flow (calls into `flash_attn`, `triton`,
`apex`, `liger_kernel`, `xformers` ops, `.apply` of a custom `torch.autograd.Function`) and from
the imports of the files that define the model's modules. Attention kernels (`flash_attn_func`,
`memory_efficient_attention`, ...) run on local heads and are not reported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..sources import SourceFile
from .ops import is_attention_name
from .trace import Event

UNSAFE_ROOTS = ("flash_attn", "triton", "apex", "liger_kernel", "xformers")


@dataclass(frozen=True)
class UnsafeKernel:
    name: str
    path: str
    line: int
    how: str  # called | imported | autograd

    @property
    def message(self) -> str:
        return (
            f"DTensor-unsafe fused kernel `{self.name}` ({self.how}): fused CUDA/Triton kernels "
            "crash or corrupt the output on sharded tensors; patch them to PyTorch equivalents "
            "before parallelize_module"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "path": self.path,
            "line": self.line,
            "how": self.how,
            "message": self.message,
        }


def _is_attention_kernel(qualname: str) -> bool:
    return is_attention_name(qualname.rsplit(".", 1)[-1]) or ".flash_attn_interface" in qualname


def from_events(events: list[Event]) -> list[UnsafeKernel]:
    out = []
    for event in events:
        if _is_attention_kernel(event.detail):
            continue
        how = "autograd" if event.detail.endswith(".apply") else "called"
        out.append(UnsafeKernel(event.detail, event.path, event.line, how))
    return out


def from_sources(sources: list[SourceFile]) -> list[UnsafeKernel]:
    """Top-level imports of unsafe kernel packages in the files whose code the flow ran."""
    out: list[UnsafeKernel] = []
    seen: set[int] = set()
    for source in sources:
        if id(source) in seen:
            continue
        seen.add(id(source))
        path = str(source.path)
        for local, (module, level, attr) in source.imports.items():
            root = module.split(".")[0]
            if level or root not in UNSAFE_ROOTS:
                continue
            qual = f"{module}.{attr}" if attr else module
            if attr is None and module in ("flash_attn", "xformers", "xformers.ops"):
                continue  # the package itself: used for its attention kernels
            if _is_attention_kernel(qual) or _is_attention_kernel(module):
                continue
            out.append(UnsafeKernel(qual, path, _line_of(source, local), "imported"))
    return out


def _line_of(source: SourceFile, local: str) -> int:
    """Line of the import that binds `local` (a text search: no full parse of the file)."""
    pattern = re.compile(rf"^\s*(?:from\s+\S+\s+)?import\b.*\b{re.escape(local)}\b", re.M)
    match = pattern.search(source.text)
    return source.text.count("\n", 0, match.start()) + 1 if match else 1


def dedupe(kernels: list[UnsafeKernel]) -> list[UnsafeKernel]:
    seen: set[tuple[str, str]] = set()
    out = []
    for kernel in kernels:
        key = (kernel.name, kernel.path)
        if key not in seen:
            seen.add(key)
            out.append(kernel)
    return out
