"""How a block list's element classes are read: a local name standing for a class.

`models/ember_dit.py` builds its blocks as `block_cls(...)` after `block_cls = EmberSandwichBlock
if sandwich_norm else EmberBlock`: both classes are the list's elements (a conditional), the
blocks' signature is read (before: an unknown class `block_cls`, its parameters unread)."""

from __future__ import annotations

from pathlib import Path

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES

EMBER = FIXTURES / "models" / "ember_dit.py"


def test_a_conditional_class_alias_names_both_classes() -> None:
    (t,) = analyze_path(EMBER, registry=False).to_json()["transformers"]
    (layers,) = t["blockLists"]
    assert layers["blockClass"] in ("EmberBlock", "EmberSandwichBlock")
    assert layers["signaturePattern"] == "Pattern_3"
    messages = " ".join(e["message"] for e in layers["evidence"])
    assert "EmberBlock, EmberSandwichBlock" in messages


def test_a_plain_class_alias_is_read(tmp_path: Path) -> None:
    source = EMBER.read_text().replace(
        "block_cls = EmberSandwichBlock if sandwich_norm else EmberBlock",
        "block_cls = EmberBlock",
    )
    path = tmp_path / "alias_dit.py"
    path.write_text(source)
    (t,) = analyze_path(path, registry=False).to_json()["transformers"]
    (layers,) = t["blockLists"]
    assert layers["blockClass"] == "EmberBlock" and layers["signaturePattern"] == "Pattern_3"
