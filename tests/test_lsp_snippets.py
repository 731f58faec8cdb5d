"""The VS Code snippets (`snippets/python.json`) parse as Python once expanded."""

from __future__ import annotations

import ast
import json
import re

import pytest

from tests.lsp_fixtures import REPO

SNIPPETS = json.loads((REPO / "snippets" / "python.json").read_text(encoding="utf-8"))
# ${1:default}, ${1|a,b|}, ${1}, $1 — VS Code's TextMate snippet syntax (no nesting used).
_PLACEHOLDER = re.compile(r"\$\{(\d+):([^}]*)\}|\$\{(\d+)\|([^|]*)\|\}|\$\{(\d+)\}|\$(\d+)")


def expand(body: list[str]) -> str:
    """The text VS Code inserts when every placeholder keeps its default (first choice)."""
    defaults: dict[str, str] = {}

    def replace(match: re.Match[str]) -> str:
        number = next(g for g in (match[1], match[3], match[5], match[6]) if g is not None)
        if match[2] is not None:
            value = match[2]
        elif match[4] is not None:
            value = match[4].split(",")[0]
        else:
            value = defaults.get(number, "")
        # A number used twice is mirrored: every use must show the same default.
        assert defaults.setdefault(number, value) == value, f"${number} defaults differ"
        return value

    return _PLACEHOLDER.sub(replace, "\n".join(body))


def test_every_integration_part_has_a_snippet():
    prefixes = {s["prefix"] for s in SNIPPETS.values()}
    assert {
        "cdit-blockadapter",
        "cdit-patchfunctor",
        "cdit-cp-planner",
        "cdit-tp-planner",
        "cdit-cli-example",
    } <= prefixes
    for snippet in SNIPPETS.values():
        assert snippet["description"] and isinstance(snippet["body"], list)


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_snippet_parses_when_expanded(name: str):
    code = expand(SNIPPETS[name]["body"])
    assert "$" not in code
    ast.parse(code, filename=name)


def test_expansion_keeps_choices_and_defaults():
    code = expand(["x = ${1:a}", "y = ${1:a} + ${2|b,c|}", "z = $1$0"])
    assert code == "x = a\ny = a + b\nz = a"
