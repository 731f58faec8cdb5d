"""The analysis result types: `AnalysisResult` (the `cdit-integrate analyze --json` contract)
holding a `TransformerResult` per transformer class, with its cached block lists
(`BlockListResult`) and the lists it does not cache (`OtherList`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .model import SCHEMA_VERSION, Diagnostic, Evidence, RegistryFacts, SeparateCfg
from .patch_functor import Reason


@dataclass
class BlockListResult:
    attr: str
    block_class: str
    block_class_path: str | None
    block_class_line: int | None
    forward_pattern: str | None
    signature_pattern: str | None
    confidence: float
    evidence: list[Evidence]
    order: int
    count: int | None
    count_expr: str | None
    alternatives: list[str] = field(default_factory=list)
    check_forward_pattern: bool | None = None
    check_num_outputs: bool | None = None
    # the cached list whose loop this list's loop directly continues, with the same block call
    # (arguments, targets) and ForwardPattern: the two can be cached as one list (`_continues`)
    continues: str | None = None
    # the container declared: "Sequential" (iterated, never called whole) is made an
    # nn.ModuleList by the integration; "ModuleList" otherwise
    container: str = "ModuleList"

    def to_json(self) -> dict[str, Any]:
        return {
            "attr": self.attr,
            "blockClass": self.block_class,
            "forwardPattern": self.forward_pattern,
            "signaturePattern": self.signature_pattern,
            "confidence": round(self.confidence, 2),
            "evidence": [e.to_json() for e in self.evidence],
            "alternatives": self.alternatives,
            "order": self.order,
            "blockCount": self.count,
            "blockCountExpr": self.count_expr,
            "blockClassPath": self.block_class_path,
            "blockClassLine": self.block_class_line,
            "checkForwardPattern": self.check_forward_pattern,
            "checkNumOutputs": self.check_num_outputs,
            "continues": self.continues,
            "container": self.container,
        }


@dataclass
class OtherList:
    attr: str
    block_class: str
    reason: str
    line: int

    def to_json(self) -> dict[str, Any]:
        return {
            "attr": self.attr,
            "blockClass": self.block_class,
            "reason": self.reason,
            "line": self.line,
        }


@dataclass
class TransformerResult:
    class_name: str
    line: int
    is_diffusers_model: bool
    path: str
    block_lists: list[BlockListResult]
    other_lists: list[OtherList]
    patch_reasons: list[Reason]
    separate_cfg: SeparateCfg
    diagnostics: list[Diagnostic]
    registry: RegistryFacts | None
    context_parallel: Any = None  # ContextParallelResult
    tensor_parallel: Any = None  # TensorParallelResult

    @property
    def patch_functor_needed(self) -> bool:
        return any(r.active for r in self.patch_reasons)

    def to_json(self) -> dict[str, Any]:
        return {
            "className": self.class_name,
            "line": self.line,
            "isDiffusersModel": self.is_diffusers_model,
            "blockLists": [b.to_json() for b in self.block_lists],
            "otherBlockLists": [o.to_json() for o in self.other_lists],
            "patchFunctor": {
                "needed": self.patch_functor_needed,
                "reasons": [r.to_json() for r in self.patch_reasons],
            },
            "separateCfg": self.separate_cfg.to_json(),
            "contextParallel": self.context_parallel.to_json() if self.context_parallel else None,
            "tensorParallel": self.tensor_parallel.to_json() if self.tensor_parallel else None,
            "registry": self.registry.to_json() if self.registry else None,
            "diagnostics": [d.to_json() for d in self.diagnostics],
        }


@dataclass
class AnalysisResult:
    path: str
    sha256: str
    transformers: list[TransformerResult]
    pipeline_path: str | None = None
    # the pipeline file's `__call__` signatures (pipeline/call_signature.py), the chosen one first
    call_signatures: list[Any] = field(default_factory=list)  # CallSignature
    # the source file's imports: unresolved ones, and the installed package its relative imports
    # were resolved against (imports.ImportReport.to_json)
    imports: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        pipeline = None
        if self.pipeline_path:
            signatures = [s.to_json() for s in self.call_signatures]
            pipeline = {
                "path": self.pipeline_path,
                "callSignature": signatures[0] if signatures else None,
                "otherCallSignatures": signatures[1:],
            }
        return {
            "schemaVersion": SCHEMA_VERSION,
            "source": {"path": self.path, "sha256": self.sha256},
            "pipeline": pipeline,
            "transformers": [t.to_json() for t in self.transformers],
            "imports": self.imports,
        }


# --- entry point ------------------------------------------------------------------------------
