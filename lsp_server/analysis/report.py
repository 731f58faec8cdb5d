"""Readable text rendering of an AnalysisResult (the default output of `cdit-integrate analyze`)."""

from __future__ import annotations

from .analyze import AnalysisResult
from .list_paths import list_source


def render_report(result: AnalysisResult) -> str:
    lines = [f"{result.path}"]
    if result.pipeline_path:
        lines.append(f"  pipeline: {result.pipeline_path}")
        if result.call_signatures:
            lines.extend(_call_signature(result.call_signatures[0], result.pipeline_path))
    for t in result.transformers:
        kind = "diffusers ModelMixin" if t.is_diffusers_model else "nn.Module"
        lines.append("")
        lines.append(f"{t.class_name}  ({kind}, line {t.line})")
        for b in t.block_lists:
            count = f"{b.count} x " if b.count is not None else ""
            alt = f" (also valid: {', '.join(b.alternatives)})" if b.alternatives else ""
            lines.append(f"  [{b.order}] {list_source(b.attr)}: {count}{b.block_class}")
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
            lines.append(f"  not cached: {list_source(o.attr)} ({o.block_class}): {o.reason}")
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
        cp = t.context_parallel
        if cp is not None:
            lines.append(
                f"  context parallel: {cp.approach}"
                + ("  (UAA recommended)" if cp.uaa_recommended else "")
            )
            for key, spec in cp.plan.to_json().items():
                lines.append(f"      {key or '<root>'}: {_plan_entry(spec)}")
            if cp.attention_mask.present:
                reorder = "reorder needed" if cp.attention_mask.reorder_needed else "no reorder"
                lines.append(f"      attention mask: {reorder}")
            for e in cp.patches:
                lines.append(f"      patch: {e.message}  ({_where(e.path, e.line, result.path)})")
            for e in cp.mask_patches:
                lines.append(
                    f"      with a mask only: {e.message}  ({_where(e.path, e.line, result.path)})"
                )
        tp = t.tensor_parallel
        if tp is not None:
            doc = tp.to_json()
            lines.append(
                f"  tensor parallel: {doc.get('attentionStrategy') or '-'}, "
                f"{len(doc.get('layers') or {})} layers, shard_div_attr "
                f"{', '.join(doc.get('shardDivAttrs') or []) or '-'}"
            )
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


def _call_signature(sig, main: str) -> list[str]:
    """`__call__` in a few lines: required parameters, sizes/frames/durations, inputs, checks."""
    inherited = f", from {sig.defined_in}" if sig.defined_in != sig.class_name else ""
    kwargs = f"; **{sig.var_keyword}" if sig.var_keyword else ""
    out = [f"  {sig.class_name}.__call__ ({_where(sig.path, sig.line, main)}{inherited}{kwargs})"]
    required = [p.name for p in sig.parameters if p.required]
    out.append(f"      required: {', '.join(required) or '-'}")
    for role in ("resolution", "frames", "duration", "steps", "guidance", "input"):
        found = [p for p in sig.parameters if p.role == role]
        if found:
            parts = [
                p.name
                + (f" ({p.input_kind})" if p.input_kind else "")
                + (f"={p.default_text}" if p.has_default else "")
                for p in found
            ]
            out.append(f"      {role}: {', '.join(parts)}")
    for c in sig.checks:
        avoid = ", ".join(f"{k}={v!r}" for k, v in (c.avoid or {}).items())
        out.append(
            f"      check {_where(c.path, c.line, main)} ({c.method}): if {c.condition}: raises"
            + (f" {c.message!r}" if c.message else "")
            + (f"  [skipped with {avoid}]" if avoid else "")
        )
    return out


def _plan_entry(spec: dict) -> str:
    if "gather_dim" in spec:
        outputs = f" x{spec['outputs']}" if spec.get("outputs", 1) > 1 else ""
        if spec.get("skip"):
            kept = ", ".join(str(i) for i in spec["skip"])
            outputs += f" (output {kept} left as it is: not a token stream)"
        return f"gather dim {spec['gather_dim']} ({spec['expected_dims']}-D){outputs}"
    parts = []
    for name, value in spec.items():
        elements = value if isinstance(value, list) else [value]  # a tuple input: one per element
        for i, s in enumerate(elements):
            kind = "output" if s["split_output"] else "split"
            label = f"{name}[{i}]" if isinstance(value, list) else name
            parts.append(f"{kind} {label} dim {s['split_dim']} ({s['expected_dims'] or '?'}-D)")
    return "; ".join(parts)


def _where(path: str, line: int, main: str) -> str:
    return f"line {line}" if path == main else f"{path}:{line}"
