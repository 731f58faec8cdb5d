"""Links from hovers and diagnostics to the glossary (docs/glossary.md, shipped in the extension).

One table maps each term the tool shows to its anchor in the glossary (an explicit
`<a id="...">` there; `tests/test_glossary_links.py` checks that every anchor exists). A link
is a `command:` URI of the extension's `cdit.openGlossary` command, which opens the glossary in
the Markdown preview; the language client trusts that command alone in server markdown.
"""

from __future__ import annotations

import json
from urllib.parse import quote

OPEN_COMMAND = "cdit.openGlossary"

# term key -> (label shown in a hover, anchor in docs/glossary.md, the link's tooltip)
TERMS: dict[str, tuple[str, str, str]] = {
    "forward-pattern": (
        "ForwardPattern",
        "forwardpattern",
        "ForwardPattern (Pattern_0 … Pattern_5)",
    ),
    "block-list": ("block list", "block-list", "block list"),
    "patch-functor": ("PatchFunctor", "patchfunctor", "PatchFunctor"),
    "separate-cfg": ("has_separate_cfg", "has-separate-cfg", "has_separate_cfg (separate CFG)"),
    "dbcache": ("DBCache", "dbcache", "DBCache: Fn / Bn blocks, residual-diff threshold"),
    "no-cache-control": ("no-cache control", "no-cache-control", "no-cache control"),
    "rank": ("rank", "rank", "rank"),
    "cp": ("CP", "cp", "context parallelism (CP)"),
    "ulysses": ("Ulysses", "ulysses", "Ulysses (context parallelism)"),
    "ring": ("Ring", "ring", "Ring (context parallelism)"),
    "uaa": ("UAA", "uaa", "UAA: Ulysses Anything Attention"),
    "cp-plan": ("CP plan", "cp-plan", "CP plan"),
    "tp": ("TP", "tp", "tensor parallelism (TP)"),
    "te-p-vae-p": ("TE-P / VAE-P", "te-p-vae-p", "TE-P / VAE-P"),
    "block-adapter": ("BlockAdapter", "blockadapter", "BlockAdapter / register name"),
}

# Diagnostic code -> the term its message is about (its `codeDescription` link).
CODE_TERMS: dict[str, str] = {
    "CDIT001": "forward-pattern",
    "CDIT002": "forward-pattern",
    "CDIT003": "forward-pattern",
    "CDIT004": "dbcache",
    "CDIT005": "block-list",
    "CDIT101": "patch-functor",
    "CDIT102": "patch-functor",
    "CDIT103": "patch-functor",
    "CDIT201": "block-adapter",
    "CDIT202": "block-adapter",
    "CDIT210": "ulysses",
    "CDIT211": "ulysses",
    "CDIT212": "uaa",
    "CDIT213": "cp",
    "CDIT214": "cp",
    "CDIT215": "cp",
    "CDIT216": "cp-plan",
    "CDIT217": "cp-plan",
    "CDIT218": "cp-plan",
    "CDIT219": "cp",
    "CDIT220": "cp-plan",
    "CDIT221": "cp-plan",
    **{f"CDIT3{n:02d}": "tp" for n in range(1, 13)},
    "CDIT901": "separate-cfg",
}


def anchor(term: str) -> str:
    return TERMS[term][1]


def command_uri(term: str) -> str:
    """`command:cdit.openGlossary?<URL-encoded JSON arguments>` for the term's anchor."""
    return f"command:{OPEN_COMMAND}?{quote(json.dumps([anchor(term)]), safe='')}"


def link(term: str) -> str:
    label, _, title = TERMS[term]
    return f'[{label}]({command_uri(term)} "Glossary: {title}")'


def code_href(code: str) -> str | None:
    """The glossary link of a diagnostic code, if its message uses a glossary term."""
    term = CODE_TERMS.get(code)
    return command_uri(term) if term else None


class Terms:
    """The terms a hover used, each linked once, in the order first used."""

    def __init__(self) -> None:
        self._used: dict[str, None] = {}

    def use(self, *terms: str) -> None:
        for term in terms:
            if term in TERMS:
                self._used.setdefault(term)

    def footer(self) -> str:
        if not self._used:
            return ""
        return "Glossary: " + " · ".join(link(t) for t in self._used)
