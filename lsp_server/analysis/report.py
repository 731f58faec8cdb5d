"""Readable text rendering of an AnalysisResult (the default output of `cdit-integrate analyze`)."""

from __future__ import annotations

from .analyze import AnalysisResult


def render_report(result: AnalysisResult) -> str:
    lines = [f"{result.path}"]
    if result.pipeline_path:
        lines.append(f"  pipeline: {result.pipeline_path}")
    for t in result.transformers:
        kind = "diffusers ModelMixin" if t.is_diffusers_model else "nn.Module"
        lines.append("")
        lines.append(f"{t.class_name}  ({kind}, line {t.line})")
        for b in t.block_lists:
            count = f"{b.count} x " if b.count is not None else ""
            alt = f" (also valid: {', '.join(b.alternatives)})" if b.alternatives else ""
            lines.append(f"  [{b.order}] self.{b.attr}: {count}{b.block_class}")
            lines.append(
                f"      ForwardPattern  {b.forward_pattern or 'none fits'}{alt}"
                f"   signature: {b.signature_pattern or '-'}"
                f"   confidence {b.confidence:.2f}"
            )
            if b.check_forward_pattern is not None:
                lines.append(
                    f"      check_forward_pattern={b.check_forward_pattern}"
                    f"  check_num_outputs={b.check_num_outputs}"
                )
            for e in b.evidence:
                lines.append(f"      - {e.message}  ({_where(e.path, e.line, result.path)})")
        for o in t.other_lists:
            lines.append(f"  not cached: self.{o.attr} ({o.block_class}): {o.reason}")
        needed = "NEEDED" if t.patch_functor_needed else "not needed"
        lines.append(f"  PatchFunctor: {needed}")
        for r in t.patch_reasons:
            state = "" if r.active else f"  [inactive unless {r.active_when}]"
            when = f" (when {r.active_when})" if r.active and r.active_when else ""
            lines.append(
                f"      - line {r.line} [{r.kind}, {r.severity}]{when}: {r.message}{state}"
            )
        cfg = t.separate_cfg
        value = (
            "unknown (no pipeline given)" if cfg.value is None and not cfg.evidence else cfg.value
        )
        lines.append(f"  has_separate_cfg: {value}")
        for e in cfg.evidence:
            lines.append(f"      - {e.message}  ({_where(e.path, e.line, result.path)})")
        if t.registry is not None:
            reg = t.registry
            lines.append(
                f"  cache-dit registry ({reg.cache_dit_version or 'not installed'}): "
                f"adapter {reg.existing_adapter or 'none'}; proposed name "
                f"{reg.proposed_name or '-'}"
                + (f"; shadowed by {', '.join(reg.shadowing_names)}" if reg.shadowing_names else "")
            )
        for d in t.diagnostics:
            lines.append(f"  {d.severity:7} {d.code} line {d.line}: {d.message}")
    return "\n".join(lines) + "\n"


def _where(path: str, line: int, main: str) -> str:
    return f"line {line}" if path == main else f"{path}:{line}"
