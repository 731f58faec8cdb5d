"""Hover on a transformer class, a block-list attribute, the loop that runs it, a block class or an
attention class: what the analysis inferred there, with links to its evidence lines, and one link
per glossary term it uses (`glossary.Terms`: a last line, each term once per hover)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from .anchors import Anchor
from .glossary import Terms
from .positions import analysis_line, line_link

if TYPE_CHECKING:
    from ..language_server import CditLanguageServer

MAX_ROWS = 12


async def hover(ls: CditLanguageServer, params: types.HoverParams) -> types.Hover | None:
    entry = await ls.documents.current(params.text_document.uri)
    if entry is None or (entry.report is None and entry.pipeline is None):
        return None
    line = analysis_line(params.position)
    anchors = entry.anchors.at(line)
    if not anchors:
        return None
    terms = Terms()
    if entry.pipeline is not None:
        sections = [_denoising_loop(entry.pipeline, terms)]
    else:
        sections = [render_anchor(a, entry.transformer(a.class_name), terms) for a in anchors]
    text = "\n\n---\n\n".join(s for s in sections if s)
    if not text:
        return None
    footer = terms.footer()
    if footer:
        text = f"{text}\n\n{footer}"
    return types.Hover(
        contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text),
        range=entry.lines.line_range(line),
    )


def render_anchor(anchor: Anchor, t: dict[str, Any] | None, terms: Terms | None = None) -> str:
    """The hover section of one anchor; the glossary terms it uses are added to `terms`."""
    if t is None:
        return ""
    render = {
        "transformer": _transformer,
        "block_list": _block_list,
        "loop": _loop,
        "other_list": _other_list,
        "block_class": _block_class,
        "attention_class": _attention_class,
    }.get(anchor.kind)
    if render is None:
        return ""
    return render(anchor, t, terms if terms is not None else Terms())


def _transformer(anchor: Anchor, t: dict[str, Any], terms: Terms) -> str:
    out = [f"**{t['className']}** (cdit analysis)", ""]
    if t["blockLists"]:
        terms.use("forward-pattern")
    terms.use("block-list", "patch-functor", "separate-cfg")
    if t["blockLists"]:
        out += [
            "| block list | block class | blocks | ForwardPattern | confidence |",
            "|---|---|---|---|---|",
        ]
        for b in t["blockLists"]:
            out.append(
                f"| `{b['attr']}` | {b['blockClass']} | {_count(b)} | "
                f"{b['forwardPattern'] or 'none fits'} | {b['confidence']:.2f} |"
            )
        out.append("")
    out.append(_patch_summary(t))
    out.append(_cfg_summary(t))
    cp = t.get("contextParallel") or {}
    if cp:
        uaa = ", UAA recommended" if cp.get("uaaRecommended") else ""
        out.append(f"- Context parallel: **{cp.get('approach')}**{_gather(cp)}{uaa}")
        terms.use("cp", *(["uaa"] if uaa else []))
    tp = t.get("tensorParallel") or {}
    if tp:
        terms.use("tp")
        out.append(
            f"- Tensor parallel: **{tp.get('attentionStrategy')}**, "
            f"{len(tp.get('layers', {}))} layers planned"
        )
    registry = t.get("registry") or {}
    if registry.get("existingAdapter"):
        terms.use("block-adapter")
        out.append(f"- cache-dit already has the adapter `{registry['existingAdapter']}`")
    return "\n".join(out)


def _block_list(anchor: Anchor, t: dict[str, Any], terms: Terms) -> str:
    b = _list(t, anchor.key)
    if b is None:
        return ""
    out = [
        _pattern_line(b, terms),
        "",
        f"{b['blockClass']}, {_count(b)} blocks, run #{b['order']} in forward",
    ]
    terms.use("block-list")
    out += _alternatives(b)
    out += ["", "Evidence:", *_evidence(b["evidence"])]
    out += _reasons(t, b["attr"], terms)
    return "\n".join(out)


def _loop(anchor: Anchor, t: dict[str, Any], terms: Terms) -> str:
    b = _list(t, anchor.key)
    if b is None:
        return ""
    out = [
        f"Loop over `self.{b['attr']}` (#{b['order']} in execution order)",
        "",
        _pattern_line(b, terms),
    ]
    out += _reasons(t, b["attr"], terms) or ["", "No PatchFunctor reason in this loop."]
    terms.use("patch-functor")
    splits = [
        f"`{key}`"
        for key in (t.get("contextParallel") or {}).get("plan", {})
        if key.startswith(f"{b['attr']}.")
    ]
    if splits:
        terms.use("cp-plan")
        out += ["", f"Context-parallel hooks on this list: {', '.join(splits)}"]
    return "\n".join(out)


def _other_list(anchor: Anchor, t: dict[str, Any], terms: Terms) -> str:
    o = next((o for o in t.get("otherBlockLists", []) if o["attr"] == anchor.key), None)
    if o is None:
        return ""
    terms.use("dbcache")
    return f"`self.{o['attr']}` ({o['blockClass']}) is not cached: {o['reason']}"


def _block_class(anchor: Anchor, t: dict[str, Any], terms: Terms) -> str:
    lists = [b for b in t["blockLists"] if b["blockClass"] == anchor.key]
    names = ", ".join(f"`{b['attr']}`" for b in lists)
    out = [f"**{anchor.key}**: block of {names}"]
    for b in lists:
        out += ["", _pattern_line(b, terms), *_evidence(b["evidence"][2:])]
        layers = _tp_layers(t, b["attr"])
        if layers:
            terms.use("tp")
            out += [
                "",
                f"Tensor-parallel plan of `{b['attr']}`:",
                "",
                "| layer | style |",
                "|---|---|",
            ]
            out += [f"| `{k}` | {v} |" for k, v in layers[:MAX_ROWS]]
            if len(layers) > MAX_ROWS:
                out.append(f"| … {len(layers) - MAX_ROWS} more | |")
    return "\n".join(out)


def _attention_class(anchor: Anchor, t: dict[str, Any], terms: Terms) -> str:
    tp = t.get("tensorParallel") or {}
    entry = next((a for a in tp.get("attention", []) if a["module"] == anchor.key), None)
    if entry is None:
        return ""
    heads = entry.get("heads")
    kv = entry.get("kvHeads")
    terms.use("tp")
    out = [
        f"Attention at `{anchor.key}`",
        "",
        f"- heads: {heads if heads is not None else '?'} (`{entry.get('headsAttr')}`)"
        + (f", key/value heads: {kv}" if kv is not None else ""),
        f"- tensor parallel: **{tp.get('attentionStrategy')}**, "
        + ("sharded" if entry.get("sharded") else "not sharded"),
    ]
    for role in ("query", "key", "value"):
        if entry.get(role):
            out.append(f"- {role}: {', '.join(f'`{m}`' for m in entry[role])}")
    if entry.get("gqa"):
        out.append(f"- GQA: {entry['gqa']}")
    notes = [
        d
        for d in t.get("diagnostics", [])
        if d["code"] in ("CDIT213", "CDIT215", "CDIT219", "CDIT308")
    ]
    for d in notes[:4]:
        terms.use("cp" if d["code"].startswith("CDIT2") else "tp")
        out.append(f"- {d['code']}: {d['message']}")
    return "\n".join(out)


def _denoising_loop(separate_cfg: dict[str, Any], terms: Terms) -> str:
    value = separate_cfg["value"]
    terms.use("separate-cfg")
    out = [
        f"Denoising loop: **has_separate_cfg={value}** "
        f"(confidence {separate_cfg.get('confidence', 0):.2f})",
        "",
        "Evidence:",
        *_evidence(separate_cfg["evidence"]),
    ]
    return "\n".join(out)


# -- pieces --


def _pattern_line(b: dict[str, Any], terms: Terms) -> str:
    pattern = b["forwardPattern"]
    terms.use("forward-pattern")
    head = f"**`self.{b['attr']}`** → "
    if pattern is None:
        return head + "no ForwardPattern fits"
    signature = b.get("signaturePattern")
    read = f"; the signature reads {signature}" if signature and signature != pattern else ""
    return head + f"`ForwardPattern.{pattern}` (confidence {b['confidence']:.2f}{read})"


def _alternatives(b: dict[str, Any]) -> list[str]:
    out = []
    if b.get("alternatives"):
        out.append(f"Alternatives: {', '.join(b['alternatives'])}")
    checks = [
        f"{name}={b[key]}"
        for name, key in (
            ("check_forward_pattern", "checkForwardPattern"),
            ("check_num_outputs", "checkNumOutputs"),
        )
        if b.get(key) is not None
    ]
    if checks:
        out.append(f"BlockAdapter: {', '.join(checks)}")
    return out


def _reasons(t: dict[str, Any], attr: str, terms: Terms) -> list[str]:
    reasons = [r for r in t["patchFunctor"]["reasons"] if r.get("blockList") in (attr, None)]
    if not reasons:
        return []
    terms.use("patch-functor")
    out = ["", "PatchFunctor reasons:"]
    for r in reasons[:MAX_ROWS]:
        when = f" (when {r['activeWhen']})" if r.get("activeWhen") else ""
        out.append(f"- line {r['line']}{when}: {r['message']}")
    return out


def _patch_summary(t: dict[str, Any]) -> str:
    reasons = t["patchFunctor"]["reasons"]
    if not t["patchFunctor"]["needed"]:
        return "- PatchFunctor: not needed" + (
            f" ({len(reasons)} inactive reasons)" if reasons else ""
        )
    lines = ", ".join(str(r["line"]) for r in reasons[:6])
    return f"- PatchFunctor: **needed** ({len(reasons)} reasons, lines {lines})"


def _cfg_summary(t: dict[str, Any]) -> str:
    value = (t.get("separateCfg") or {}).get("value")
    if value is None:
        return "- has_separate_cfg: unknown (analyze with the pipeline to decide)"
    return f"- has_separate_cfg: **{value}**"


def _gather(cp: dict[str, Any]) -> str:
    gathers = [
        k for k, v in cp.get("plan", {}).items() if isinstance(v, dict) and "gather_dim" in v
    ]
    return f", gather at {', '.join(f'`{g}`' for g in gathers)}" if gathers else ""


def _tp_layers(t: dict[str, Any], attr: str) -> list[tuple[str, str]]:
    layers = (t.get("tensorParallel") or {}).get("layers", {})
    return [(k, v) for k, v in layers.items() if k.startswith(f"{attr}.")]


def _list(t: dict[str, Any], attr: str) -> dict[str, Any] | None:
    return next((b for b in t["blockLists"] if b["attr"] == attr), None)


def _count(b: dict[str, Any]) -> str:
    if b.get("blockCount") is not None:
        return str(b["blockCount"])
    return f"`{b['blockCountExpr']}`" if b.get("blockCountExpr") else "?"


def _evidence(items: list[dict[str, Any]]) -> list[str]:
    out = []
    for e in items:
        label = f"{os.path.basename(e['path'])}:{e['line']}"
        out.append(f"- [{label}]({line_link(e['path'], e['line'])}) {e['message']}")
    return out
