"""Result types of the analysis: frozen dataclasses that serialize to the `analyze` JSON contract.

Every inferred fact carries `Evidence` (file, 1-based line, a one-line reason) so that a user can
check it against the source. The JSON layout is documented in DESIGN.md
("cdit-integrate analyze JSON").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

SCHEMA_VERSION = 1

Severity = Literal["error", "warning", "info"]


class AnalysisError(Exception):
    """Input that cannot be analyzed. `code` is stable (used by the CLI and the server);
    `detail` says what is wrong, `path` and `line` where (when known); `message` is the
    three together, as printed."""

    def __init__(
        self, code: str, message: str, hint: str = "", path: str = "", line: int = 0
    ) -> None:
        located = f"{path}:{line}: {message}" if path and line else message
        located = f"{path}: {message}" if path and not line else located
        super().__init__(located)
        self.code = code
        self.message = located
        self.detail = message
        self.hint = hint
        self.path = path
        self.line = line

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message, "hint": self.hint}
        if self.path:
            error["path"] = self.path
        if self.line:
            error["line"] = self.line
        return {"error": error}


@dataclass(frozen=True)
class Evidence:
    message: str
    path: str
    line: int

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "path": self.path, "line": self.line}


@dataclass(frozen=True)
class Diagnostic:
    severity: Severity
    code: str
    message: str
    path: str
    line: int
    # A machine-readable fix, where one exists: `{"setting": "cpSizes" | "tpSizes", "drop":
    # [sizes that fail], "fits": [sizes that work]}` for the checks of parallel degrees.
    fix: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "path": self.path,
            "line": self.line,
        }
        if self.fix is not None:
            out["fix"] = self.fix
        return out


@dataclass(frozen=True)
class SeparateCfg:
    """Whether the pipeline calls the transformer twice per denoising step (cond + uncond)."""

    value: bool | None
    evidence: tuple[Evidence, ...] = ()
    confidence: float = 0.0
    # the pipeline call arguments it was decided for (None: the default path)
    call_arguments: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "value": self.value,
            "confidence": round(self.confidence, 2),
            "evidence": [e.to_json() for e in self.evidence],
        }
        if self.call_arguments is not None:
            out["callArguments"] = list(self.call_arguments)
        return out


@dataclass(frozen=True)
class RegistryFacts:
    """Facts read from the installed cache-dit registries. Reported, never used for inference."""

    cache_dit_version: str | None
    existing_adapter: str | None = None
    shadowing_names: tuple[str, ...] = ()
    proposed_name: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Class names (transformer and/or pipeline) that `existing_adapter` is a prefix of.
    adapter_matched_on: tuple[str, ...] = ()
    # First registered context-/tensor-parallel planner name matching the transformer class.
    cp_planner: str | None = None
    tp_planner: str | None = None
    # What cache-dit's registry would do to an integration of this class that does not take
    # care (a registered adapter shadowing the class, separate CFG forced by name), with advice.
    warnings: tuple[str, ...] = ()
    # The register name the cache-dit checkout target accepts (same rule as the check:
    # `register_names`), or None and why none can pass.
    checkout_name: str | None = None
    checkout_name_reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "cacheDitVersion": self.cache_dit_version,
            "checkoutName": self.checkout_name,
            "checkoutNameReason": self.checkout_name_reason,
            "warnings": list(self.warnings),
            "existingAdapter": self.existing_adapter,
            "proposedName": self.proposed_name,
            "shadowedBy": list(self.shadowing_names),
            "notes": list(self.notes),
            "adapterMatchedOn": list(self.adapter_matched_on),
            "cpPlanner": self.cp_planner,
            "tpPlanner": self.tp_planner,
        }
