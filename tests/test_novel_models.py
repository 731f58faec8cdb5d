"""Invented models (tests/fixtures): the analysis matches the labels, and it drives cache-dit.

The runtime half builds each tiny model on CPU, enables cache-dit with the block lists and
ForwardPatterns the *analysis* chose, and checks the result against the uncached model: where the
analysis says no PatchFunctor is needed, caching (step 0 and a fully cached step 1) must reproduce
the baseline; where it flags index-dependent work or a binding problem, it must not.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES

LABELS = json.loads((FIXTURES / "novel_labels.json").read_text())["records"]


def _analyze(record: dict):
    pipeline = record.get("pipeline_file")
    result = analyze_path(
        FIXTURES / record["file"],
        record["transformer_class"],
        FIXTURES / pipeline if pipeline else None,
        registry=False,
    )
    (transformer,) = result.transformers
    return transformer


@pytest.mark.parametrize("record", LABELS, ids=[r["id"] for r in LABELS])
def test_analysis_matches_labels(record):
    t = _analyze(record)
    assert [b.attr for b in t.block_lists] == [b["attr"] for b in record["block_lists"]]
    for got, want in zip(t.block_lists, record["block_lists"], strict=True):
        accepted = {want["forward_pattern"], *(want.get("signature_patterns") or [])}
        assert got.forward_pattern in accepted, (got.attr, got.forward_pattern, want)
    assert t.patch_functor_needed is record["patch_functor"]["needed"], [
        r.message for r in t.patch_reasons
    ]
    if record.get("has_separate_cfg") is not None:
        assert t.separate_cfg.value is record["has_separate_cfg"]


def _verifier():
    spec = importlib.util.spec_from_file_location(
        "verify_novel_fixtures", FIXTURES / "verify_novel_fixtures.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def verifier():
    pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    saved = list(sys.path)
    try:
        yield _verifier()
    finally:
        sys.path[:] = saved


def _runtime_cases():
    by_class = {r["transformer_class"]: r for r in LABELS}
    text = (FIXTURES / "verify_novel_fixtures.py").read_text()
    return [r for cls, r in by_class.items() if f'cls="{cls}"' in text]


@pytest.mark.parametrize("record", _runtime_cases(), ids=lambda r: r["id"])
def test_analysis_drives_cache_dit(verifier, record):
    import torch

    case = next(c for c in verifier.CASES if c["cls"] == record["transformer_class"])
    t = _analyze(record)
    lists = [b.attr for b in t.block_lists]
    patterns = [b.forward_pattern for b in t.block_lists]
    torch.manual_seed(0)
    model = getattr(verifier.load(case["module"]), case["cls"])(**case["init"]).eval()
    torch.manual_seed(1)
    inputs = case["inputs"]()
    with torch.no_grad():
        baseline = model(**inputs)
    try:
        outputs = verifier.run_cached(model, inputs, lists, patterns)
        reproduced = all(verifier.same(baseline, out) for out in outputs)
    except Exception:  # a crash under caching is one way of not reproducing the baseline
        reproduced = False
    # Reasons that hold whatever the inputs (not those waiting on an optional input).
    breaking = [
        r for r in t.patch_reasons if r.active and r.severity == "high" and not r.active_when
    ]
    if not t.patch_functor_needed:
        assert reproduced, f"{record['id']}: cached output differs with {patterns}"
    elif breaking:
        assert not reproduced, f"{record['id']}: flagged {breaking[0].kind} but cache matched"
