"""Code lenses on each transformer class: "ForwardPattern: …", "Generate integration",
"Run verification". Listing is cheap (positions and `data` only); titles and commands are filled
in by `codeLens/resolve`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lsprotocol import types

from . import commands as cmd

if TYPE_CHECKING:
    from ..language_server import CditLanguageServer

KINDS = ("pattern", "generate", "verify")


async def code_lens(
    ls: CditLanguageServer, params: types.CodeLensParams
) -> list[types.CodeLens] | None:
    uri = params.text_document.uri
    entry = await ls.documents.current(uri)
    if entry is not None and entry.pipeline is not None:
        (loop,) = entry.anchors.of_kind("denoising_loop") or [None]
        if loop is None:
            return None
        value = entry.pipeline["value"]
        title = f"has_separate_cfg: {value}"
        # A title only (an empty command is not clickable): the hover holds the evidence.
        command = types.Command(title=title, command="")
        return [types.CodeLens(range=entry.lines.line_range(loop.line), command=command)]
    if entry is None or not entry.transformers:
        return None
    lenses = []
    for t in entry.transformers:
        range_ = entry.lines.line_range(t["line"])
        for kind in KINDS:
            data = {"uri": uri, "version": entry.version, "className": t["className"], "kind": kind}
            lenses.append(types.CodeLens(range=range_, data=data))
    return lenses


async def resolve_code_lens(ls: CditLanguageServer, lens: types.CodeLens) -> types.CodeLens:
    data: dict[str, Any] = lens.data if isinstance(lens.data, dict) else {}
    uri, class_name, kind = data.get("uri"), data.get("className"), data.get("kind")
    entry = ls.documents.get(uri, data.get("version")) if uri else None
    if entry is None and uri:
        entry = await ls.documents.current(uri)
    t = entry.transformer(class_name) if entry else None
    args = [{"uri": uri, "className": class_name}]
    if t is None:
        lens.command = types.Command(title="cdit: analysis out of date", command="")
        return lens
    if kind == "pattern":
        lens.command = types.Command(
            title=pattern_title(t), command=cmd.ANALYZE_FILE, arguments=args
        )
    elif kind == "generate":
        title = "Generate integration"
        if not ls.trusted:
            title += " (disabled: untrusted workspace)"
        elif not ls.codegen_available():
            title += " (code generation not installed)"
        lens.command = types.Command(title=title, command=cmd.GENERATE, arguments=args)
    else:
        title = "Run verification"
        if not ls.trusted:
            title += " (disabled: untrusted workspace)"
        elif not ls.runtime_available():
            title += " (needs the [runtime] extra)"
        lens.command = types.Command(title=title, command=cmd.RUN_VERIFICATION, arguments=args)
    return lens


def pattern_title(t: dict[str, Any]) -> str:
    parts = [f"{b['attr']}={b['forwardPattern'] or 'none fits'}" for b in t["blockLists"]]
    head = "ForwardPattern: " + (", ".join(parts) if parts else "no cached block list")
    if t["patchFunctor"]["needed"]:
        head += " · PatchFunctor needed"
    return head
