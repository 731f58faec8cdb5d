"""A bounded mutation-fuzz campaign of the analyzer on real diffusers transformer files: no
exception escapes `analyze_path`, no case runs past its bound, every report is strict JSON and
maps to editor diagnostics. See `tests/analyzer_fuzz.py` for the mutations and the larger runs."""

from __future__ import annotations

import random

import pytest

from lsp_server.analysis import AnalysisError, analyze_path
from tests import analyzer_fuzz as fuzz
from tests.conftest import FIXTURES, diffusers_file
from tests.lsp_fixtures import line_of

SEED = 0
CASES = 200
BOUND_S = 5.0  # per case; the slowest unmutated file takes about 1 s on a loaded 2-core machine


def test_mutated_diffusers_sources_get_a_report_or_a_clean_error():
    result = fuzz.campaign(SEED, CASES, BOUND_S)
    summary = result.summary()
    failures = result.failures()
    assert not failures, "\n\n".join(fuzz.describe(o) for o in failures[:5]) + (
        f"\n\nreplay one with: python -m tests.analyzer_fuzz --seed {SEED} --case N"
    )
    # The campaign reaches the analysis proper, not only the parser, and every mutation ran.
    assert summary["ok"] >= CASES // 5, summary
    assert summary["clean_errors"] >= CASES // 5, summary
    assert set(summary["mutations"]) == set(fuzz.MUTATIONS), summary


def test_cases_replay_identically():
    files = fuzz.transformer_sources()
    for number in random.Random(1).sample(range(10_000), 5):
        assert fuzz.make_case(3, number, files) == fuzz.make_case(3, number, files)


def test_the_bound_catches_a_hang_and_crashes_are_reported(tmp_path, monkeypatch):
    case = fuzz.make_case(SEED, 0, fuzz.transformer_sources())

    def spin(*args, **kwargs):
        while True:
            pass

    def explode(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    def refuse(*args, **kwargs):
        raise AnalysisError("syntax-error", "x.py:1: syntax error: invalid syntax")

    monkeypatch.setattr(fuzz, "analyze_path", spin)
    assert fuzz.run_case(case, bound=0.2, scratch=tmp_path).result == "hang"
    monkeypatch.setattr(fuzz, "analyze_path", explode)
    crash = fuzz.run_case(case, scratch=tmp_path)
    assert crash.result == "crash" and "RecursionError" in crash.detail
    monkeypatch.setattr(fuzz, "analyze_path", refuse)
    assert fuzz.run_case(case, scratch=tmp_path).result == "error:syntax-error"


def test_nesting_deeper_than_the_recursive_walks_is_a_clean_error():
    # Found by the campaign (seed 1, case 529): 400 unary minus signs parse, but the analysis
    # of statements between blocks unparses them recursively and raised RecursionError.
    path = diffusers_file("models/transformers/transformer_flux.py")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    loop = line_of("".join(lines), "for index_block, block in enumerate(self.transformer_blocks)")
    indent = " " * (len(lines[loop]) - len(lines[loop].lstrip()) + 4)
    lines.insert(loop + 1, f"{indent}hidden_states = {'-' * 400}hidden_states\n")
    with pytest.raises(AnalysisError) as caught:
        analyze_path(path, text="".join(lines))
    assert caught.value.code == "unparsable" and "nested too deeply" in caught.value.message


def test_a_long_call_chain_is_analyzed_within_the_bound(tmp_path):
    path = FIXTURES / "models" / "demo_mmdit.py"
    text = path.read_text(encoding="utf-8")
    loop = line_of(text, "for block in self.transformer_blocks:")
    lines = text.splitlines(keepends=True)
    indent = " " * (len(lines[loop]) - len(lines[loop].lstrip()))
    lines.insert(loop, f"{indent}hidden_states = hidden_states{'()' * 2000}\n")
    case = fuzz.Case(0, path, ("deep_nesting",), "".join(lines))
    assert fuzz.run_case(case, bound=1.0, scratch=tmp_path).result != "hang"
