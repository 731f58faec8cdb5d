"""Code actions on a transformer file: generate the integration or one part of it, as a
`WorkspaceEdit` the editor previews; quick fixes for PatchFunctor diagnostics and for a copied
module's relative imports (CDIT402, `imports.quick_fixes`).

Actions are listed cheaply (title, kind, `data`) and their edits are computed when the client
resolves one (`codeAction/resolve`). Where generation cannot run (code generation not installed,
untrusted workspace) the actions are shown disabled with the reason, when the client can show that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lsprotocol import types

from ..services.generate import PARTS
from . import generation, imports
from .commands import generated_edit, workspace_root

if TYPE_CHECKING:
    from ..language_server import CditLanguageServer

GENERATE_KIND = "source.cdit.generate"
KINDS = [types.CodeActionKind.QuickFix, types.CodeActionKind.Source, GENERATE_KIND]
# Diagnostics with an obvious fix: code the PatchFunctor skeleton handles.
_QUICK_FIX_CODES = {"CDIT101": "patch_functor", "CDIT001": "patch_functor"}


async def code_actions(
    ls: CditLanguageServer, params: types.CodeActionParams
) -> list[types.CodeAction] | None:
    fixes = imports.quick_fixes(ls, params)  # on any Python file, transformer or not
    capabilities = ls.client_capabilities.text_document
    if fixes and not _resolves_edits(capabilities.code_action if capabilities else None):
        fixes = [await imports.resolve_quick_fix(ls, f) for f in fixes]
    sizes = _size_fixes(ls, params)
    return [*fixes, *sizes, *(await _generation_actions(ls, params) or [])] or None


# The extension's command that writes `cdit.cpSizes` / `cdit.tpSizes` (workspace settings).
SET_SIZES_COMMAND = "cdit.setParallelSizes"
_SIZE_LABELS = {"cpSizes": "CP", "tpSizes": "TP"}


def _size_fixes(ls: CditLanguageServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    """A check of a parallel degree the model cannot take (CDIT210, CDIT301): consider only the
    sizes that fit, through the setting the sizes come from."""
    if not _allowed(params.context.only, types.CodeActionKind.QuickFix):
        return []
    out = []
    for d in params.context.diagnostics:
        fix = d.data.get("fix") if d.source == "cdit" and isinstance(d.data, dict) else None
        if not isinstance(fix, dict) or fix.get("setting") not in _SIZE_LABELS:
            continue
        setting = fix["setting"]
        current = ls.settings.cp_sizes if setting == "cpSizes" else ls.settings.tp_sizes
        drop = {s for s in fix.get("drop") or [] if isinstance(s, int)}
        fits = [s for s in fix.get("fits") or [] if isinstance(s, int) and s >= 2]
        kept = [s for s in current if s not in drop] or fits[:3]
        if not kept:
            continue
        label = _SIZE_LABELS[setting]
        out.append(
            types.CodeAction(
                title=f"cdit: Check only {label} sizes {kept} (cdit.{setting})",
                kind=types.CodeActionKind.QuickFix,
                diagnostics=[d],
                command=types.Command(
                    title=f"Check only {label} sizes {kept}",
                    command=SET_SIZES_COMMAND,
                    arguments=[{"setting": setting, "sizes": kept}],
                ),
            )
        )
    return out


async def _generation_actions(
    ls: CditLanguageServer, params: types.CodeActionParams
) -> list[types.CodeAction] | None:
    uri = params.text_document.uri
    entry = await ls.documents.current(uri)
    if entry is None or not entry.transformers:
        return None
    wanted = params.context.only
    disabled = _disabled_reason(ls)
    capabilities = ls.client_capabilities.text_document
    action_caps = capabilities.code_action if capabilities else None
    can_show_disabled = bool(action_caps and action_caps.disabled_support)
    if disabled and not can_show_disabled:
        return None
    checkout = _targets_checkout(ls)
    actions: list[types.CodeAction] = []
    for d in params.context.diagnostics:
        part = _QUICK_FIX_CODES.get(str(d.code)) if d.source == "cdit" else None
        data = d.data if isinstance(d.data, dict) else {}
        if part and _allowed(wanted, types.CodeActionKind.QuickFix):
            part = part if checkout else "all"
            title = (
                f"cdit: Generate the {PARTS[part]}"
                if checkout
                else "cdit: Generate the integration (its PatchFunctor included)"
            )
            actions.append(
                _action(
                    title,
                    types.CodeActionKind.QuickFix,
                    {"uri": uri, "className": data.get("className"), "parts": [part]},
                    disabled,
                    diagnostics=[d],
                )
            )
    for t in entry.transformers:
        for part, label in PARTS.items():
            if part != "all" and not checkout:
                continue  # a standalone module holds every part in one file
            if part == "patch_functor" and not t["patchFunctor"]["needed"]:
                continue
            kind = f"{GENERATE_KIND}.{part}"
            if not _allowed(wanted, kind):
                continue
            title = f"cdit: Generate {label} for {t['className']}"
            data = {"uri": uri, "className": t["className"], "parts": [part]}
            actions.append(_action(title, kind, data, disabled))
    if actions and not disabled and not _resolves_edits(action_caps):
        # A client without `codeAction/resolve` for edits gets them in the list (computed once
        # per set of parts).
        edits: dict[tuple[str, ...], types.CodeAction] = {}
        for action in actions:
            parts = tuple(action.data["parts"])
            if parts not in edits:
                edits[parts] = await resolve_code_action(ls, _copy(action))
            action.edit, action.disabled = edits[parts].edit, edits[parts].disabled
    return actions or None


def _resolves_edits(caps: types.CodeActionClientCapabilities | None) -> bool:
    support = caps.resolve_support if caps else None
    return bool(support and "edit" in support.properties)


def _copy(action: types.CodeAction) -> types.CodeAction:
    return types.CodeAction(title=action.title, kind=action.kind, data=dict(action.data))


async def resolve_code_action(ls: CditLanguageServer, action: types.CodeAction) -> types.CodeAction:
    if imports.is_quick_fix(action):
        return await imports.resolve_quick_fix(ls, action)
    data: dict[str, Any] = action.data if isinstance(action.data, dict) else {}
    if action.disabled is not None or not ls.trusted or "uri" not in data:
        return action
    edit, result = await generated_edit(
        ls,
        data["uri"],
        data.get("className"),
        None,
        data.get("answers"),
        data.get("parts", ["all"]),
    )
    if edit is not None:
        action.edit = edit
    else:
        action.disabled = types.CodeActionDisabled(reason=result["error"]["message"])
    return action


def _targets_checkout(ls: CditLanguageServer) -> bool:
    """Whether generation goes into a cache-dit checkout (then each part is its own files)."""
    stored = generation.gate_check_answers(workspace_root(ls)) or {}
    kind = (stored.get("target") or {}).get("kind") if isinstance(stored, dict) else None
    if kind:
        return kind == "cache-dit-checkout"
    return ls.settings.target == "cache-dit-checkout" and bool(ls.settings.cache_dit_path)


def _disabled_reason(ls: CditLanguageServer) -> str | None:
    if not ls.trusted:
        return "the workspace is not trusted"
    if not ls.codegen_available():
        return "code generation (lsp_server.codegen) is not installed"
    return None


def _action(
    title: str,
    kind: str,
    data: dict[str, Any],
    disabled: str | None,
    diagnostics: list[types.Diagnostic] | None = None,
) -> types.CodeAction:
    return types.CodeAction(
        title=title,
        kind=kind,
        data=data,
        diagnostics=diagnostics,
        disabled=types.CodeActionDisabled(reason=disabled) if disabled else None,
    )


def _allowed(only: list[str] | None, kind: str) -> bool:
    """Whether `kind` is requested (`only` holds prefixes such as "source" or "quickfix")."""
    return not only or any(kind == o or kind.startswith(f"{o}.") for o in only)
