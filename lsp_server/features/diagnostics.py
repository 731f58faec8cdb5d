"""Analysis report -> LSP diagnostics: code, a message that says what to do, evidence links, and
the code linked to the glossary term its message uses (`glossary.CODE_TERMS`).

Every diagnostic of the report is mapped, and every PatchFunctor reason (the report's `CDIT101` /
`CDIT102` entries are rebuilt from the reasons so that each carries its block list's evidence).
A diagnostic whose evidence lies in another file (a block class or attention processor imported
from elsewhere) is shown on the transformer class, with the real place as related information.
Registry notes (line 1 in the report) are shown on the transformer class too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from lsprotocol import types

from . import glossary
from .positions import LineIndex, same_file, uri_for, whole_line_range

SOURCE = "cdit"

_SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "info": types.DiagnosticSeverity.Information,
}

# What to do, for codes whose analysis message states only the finding.
_HINTS = {
    "CDIT001": "write a PatchFunctor (or wrap the block) so that forward takes hidden_states "
    "[, encoder_hidden_states] first and returns them in a ForwardPattern order",
    "CDIT002": "check the block's forward parameters and return order, then confirm the pattern "
    "in the gate check",
    "CDIT004": "leave this list out of the BlockAdapter",
    "CDIT102": "nothing to do for pipelines that do not pass it; if yours does, generate the "
    "PatchFunctor skeleton",
    "CDIT218": "compare with the model's diffusers _cp_plan before choosing",
}
_PATCH_HINTS = {
    "keyword_binding": "generate the PatchFunctor skeleton: it calls the block with the streams "
    "as positional arguments",
    "keyword_only_streams": "generate the PatchFunctor: each block runs through a step that "
    "takes its streams positionally",
    "block_output_access": "generate the PatchFunctor: each block runs through a step that "
    "returns the streams",
    "loop_index_dependent": "generate the PatchFunctor skeleton: it moves this work into each "
    "block's call",
    "per_block_work": "generate the PatchFunctor: it moves this work into each block's call",
    "per_block_exchange": "generate the PatchFunctor: each block's call does its part; keep "
    "Bn_compute_blocks=0",
    "per_block_state": "compute the per-block values inside the block, or leave caching out: "
    "blocks that caching skips produce no values",
    "loop_invariant": "hoist this before the loop (the PatchFunctor skeleton does it)",
    "block_list_access": "read what you need before cache-dit wraps the list (PatchFunctor "
    "skeleton)",
    "stream_order": "swap the streams in a PatchFunctor so that the denoised stream comes first",
    "loop_bound": "generate the PatchFunctor: its copy of forward loops len(<list>) times",
    "partial_loop": "run the whole list in one loop (the blocks called apart inside it, e.g. "
    "by index), or leave caching out: cache-dit's wrapper runs a list whole",
    "reversed_loop": "keep the list in the order it runs (build it reversed) and loop over it "
    "first to last, or leave caching out",
    "repeated_block_call": "make each call its own block of the list (a list twice as long), or "
    "leave caching out",
    "repeated_loops": "run the list in one loop per call, or leave caching out",
    "early_exit": "loop over the blocks that run (a list of those), or leave caching out",
    "loop_value_after": "read what you need after the loop from the list itself "
    "(`len(self.blocks) - 1`, `self.blocks[-1]`) or from a name the loop header does not bind, "
    "or leave caching out",
    "stored_block_output": "keep what the blocks hand each other in names the loop passes to "
    "the next call (`ctx, x = layer(x, ctx=ctx, ...)`), or leave caching out",
    "token_count_change": "cache the lists between the stages that change the token count "
    "(their blocks keep it), or leave caching out: a skipped block's residual needs one shape",
    "loop_bound_unproven": "loop over the whole list (or over len(<list>)) if it runs every "
    "block; caching cannot be generated while the loop runs another count",
}
_PATCH_DEFAULT = "generate the PatchFunctor skeleton"

# Built-in severities that differ from the analysis': checks of parallel degrees taken from the
# `cdit.cpSizes` / `cdit.tpSizes` settings (2, 4, 8 by default) are about sizes a user may never
# run, so they warn; `cdit.diagnosticSeverity` raises them to errors (or turns any code off).
DEFAULT_SEVERITY: dict[str, str] = {"CDIT210": "warning", "CDIT301": "warning"}
_LSP_LEVEL = {**_SEVERITY, "hint": types.DiagnosticSeverity.Hint}

# Server-side codes (the analysis uses CDIT0xx-CDIT4xx).
PAUSED = "CDIT900"
SEPARATE_CFG = "CDIT901"


def build_diagnostics(
    report: dict[str, Any],
    path: str,
    lines: LineIndex,
    severity: Mapping[str, str] | None = None,
) -> list[types.Diagnostic]:
    """``severity``: code -> error | warning | info | hint | off (`cdit.diagnosticSeverity`),
    over `DEFAULT_SEVERITY`."""
    levels = {**DEFAULT_SEVERITY, **(severity or {})}
    out: list[types.Diagnostic] = []
    seen: set[tuple[str, int, str]] = set()
    for t in report.get("transformers", []):
        for diagnostic in _transformer_diagnostics(t, path, lines):
            key = (str(diagnostic.code), diagnostic.range.start.line, diagnostic.message)
            if key in seen:
                continue
            seen.add(key)
            level = levels.get(str(diagnostic.code))
            if level == "off":
                continue
            if level in _LSP_LEVEL:
                diagnostic.severity = _LSP_LEVEL[level]
            out.append(diagnostic)
    return out


def paused_diagnostic(message: str, line: int, lines: LineIndex) -> types.Diagnostic:
    """Shown instead of the findings while a transformer file does not parse."""
    return types.Diagnostic(
        range=lines.line_range(line),
        message=f"cdit analysis paused: {message}; the findings come back when the file parses",
        severity=types.DiagnosticSeverity.Information,
        code=PAUSED,
        source=SOURCE,
    )


def separate_cfg_diagnostic(
    separate_cfg: dict[str, Any], path: str, lines: LineIndex
) -> types.Diagnostic:
    """A pipeline's denoising loop: the `has_separate_cfg` its BlockAdapter needs, and why."""
    value = bool(separate_cfg["value"])
    first, *rest = separate_cfg["evidence"]
    calls = "twice (cond and uncond)" if value else "once"
    message = (
        f"has_separate_cfg={value}: this loop calls the transformer {calls} per step on the "
        f"default path. Fix: pass has_separate_cfg={value} to the BlockAdapter of its transformer"
    )
    return _diagnostic(
        code=SEPARATE_CFG,
        severity="info",
        message=message,
        where=(first["path"], first["line"]),
        related=rest,
        transformer=None,
        path=path,
        lines=lines,
        data={"hasSeparateCfg": value},
    )


def file_diagnostic(d: dict[str, Any], path: str, lines: LineIndex) -> types.Diagnostic:
    """A diagnostic of the analysis that belongs to no transformer (the imports of a pipeline)."""
    return _diagnostic(
        code=d["code"],
        severity=d["severity"],
        message=d["message"],
        where=(d["path"], d["line"]),
        related=[],
        transformer=None,
        path=path,
        lines=lines,
        data={},
    )


def _transformer_diagnostics(
    t: dict[str, Any], path: str, lines: LineIndex
) -> list[types.Diagnostic]:
    class_name = t["className"]
    lists = {b["attr"]: b for b in t.get("blockLists", [])}
    by_decl_line = {b["evidence"][0]["line"]: b for b in lists.values() if b.get("evidence")}
    cp = t.get("contextParallel") or {}
    cp_evidence = list(cp.get("evidence", []))
    mask_sources = list((cp.get("attentionMask") or {}).get("sources", []))
    out = []
    for reason in (t.get("patchFunctor") or {}).get("reasons", []):
        block = lists.get(reason.get("blockList") or "")
        out.append(_from_reason(reason, block, class_name, path, lines))
    for d in t.get("diagnostics", []):
        code = d["code"]
        if code in ("CDIT101", "CDIT102"):
            continue  # rebuilt from the reasons above
        related: list[dict[str, Any]] = []
        block = None
        if code.startswith("CDIT00"):
            block = by_decl_line.get(d["line"])
            related = list(block["evidence"]) if block else []
        elif code.startswith("CDIT21"):
            related = cp_evidence + (mask_sources if code in ("CDIT217", "CDIT219") else [])
        out.append(
            _diagnostic(
                code=code,
                severity=d["severity"],
                message=_with_hint(d["message"], _HINTS.get(code)),
                where=(d["path"], d["line"]),
                related=related,
                transformer=t,
                path=path,
                lines=lines,
                data={
                    "className": class_name,
                    "blockList": block["attr"] if block else None,
                    "fix": d.get("fix"),
                },
            )
        )
    return out


def _from_reason(
    reason: dict[str, Any],
    block: dict[str, Any] | None,
    class_name: str,
    path: str,
    lines: LineIndex,
) -> types.Diagnostic:
    hint = _PATCH_HINTS.get(reason["kind"], _PATCH_DEFAULT)
    if reason.get("active", True):
        when = reason.get("activeWhen")
        head = f"PatchFunctor needed (when {when})" if when else "PatchFunctor needed"
        code, severity, message = "CDIT101", "warning", f"{head}: {reason['message']}"
    else:
        code, severity = "CDIT102", "info"
        message = f"inactive unless {reason.get('activeWhen')}: {reason['message']}"
        hint = _HINTS["CDIT102"]
    return _diagnostic(
        code=code,
        severity=severity,
        message=_with_hint(message, hint),
        where=(path, reason["line"]),
        related=list(block["evidence"][:2]) if block else [],
        transformer=None,
        path=path,
        lines=lines,
        data={
            "className": class_name,
            "blockList": reason.get("blockList"),
            "kind": reason["kind"],
        },
    )


def _diagnostic(
    *,
    code: str,
    severity: str,
    message: str,
    where: tuple[str, int],
    related: list[dict[str, Any]],
    transformer: dict[str, Any] | None,
    path: str,
    lines: LineIndex,
    data: dict[str, Any],
) -> types.Diagnostic:
    where_path, where_line = where
    infos = []
    if not same_file(where_path, path) or (where_line <= 1 and transformer is not None):
        # Elsewhere (or a file-level note): show it on the transformer class.
        if not same_file(where_path, path):
            infos.append(_related(where_path, where_line, message, path, lines))
            message = f"{message} (in {os.path.basename(where_path)}:{where_line})"
        where_line = transformer["line"] if transformer else 1
    for e in related:
        if e["line"] == where_line and same_file(e["path"], path):
            continue
        infos.append(_related(e["path"], e["line"], e["message"], path, lines))
    href = glossary.code_href(code)
    return types.Diagnostic(
        range=lines.line_range(where_line),
        message=message,
        severity=_SEVERITY.get(severity, types.DiagnosticSeverity.Information),
        code=code,
        # The code links to its term in the glossary (VS Code opens `command:` hrefs of codes).
        code_description=types.CodeDescription(href=href) if href else None,
        source=SOURCE,
        related_information=infos or None,
        data={k: v for k, v in data.items() if v is not None},
    )


def _related(
    where_path: str, line: int, message: str, path: str, lines: LineIndex
) -> types.DiagnosticRelatedInformation:
    range_ = lines.line_range(line) if same_file(where_path, path) else whole_line_range(line)
    return types.DiagnosticRelatedInformation(
        location=types.Location(uri=uri_for(where_path), range=range_), message=message
    )


def _with_hint(message: str, hint: str | None) -> str:
    return f"{message.rstrip('.')}. Fix: {hint}." if hint else message
