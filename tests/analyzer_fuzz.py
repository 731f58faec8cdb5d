"""Mutation fuzzing of the analyzer on the installed diffusers transformer sources.

Each case takes one real file from `diffusers/models/transformers/`, damages it (line deletions,
statement deletions, token swaps, truncation, indentation damage, random bytes, deep nesting,
duplicated blocks, or several of these at once) and runs the analyzer's public entry
(`analyze_path(path, text=...)`; random-byte cases also go through the file on disk) and the
editor's mapping of its report to diagnostics and anchors. A case passes when it ends in a report
that serializes to strict JSON or in an `AnalysisError` with a one-line message, within the time
bound, twice in a row (once may be a load spike). Cases are numbered and derived from
(seed, number), so any failure can be replayed alone.

`tests/test_analyzer_fuzz.py` runs a bounded campaign in the test suite; run a larger one with

    .venv/bin/python -m tests.analyzer_fuzz --cases 5000 --seed 1 --failures build/fuzz
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import random
import signal
import sys
import tempfile
import time
import tokenize
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

from lsp_server.analysis import AnalysisError, analyze_path
from lsp_server.features.anchors import build_anchors
from lsp_server.features.diagnostics import build_diagnostics
from lsp_server.features.positions import LineIndex
from tests.conftest import diffusers_root

DEFAULT_BOUND_S = 5.0
CODEC = PositionCodec(types.PositionEncodingKind.Utf16)


def transformer_sources() -> list[Path]:
    files = sorted((diffusers_root() / "models" / "transformers").glob("*.py"))
    return [f for f in files if f.name != "__init__.py"]


@dataclass(frozen=True)
class Case:
    number: int
    path: Path  # the real file: relative imports resolve from its folder
    kinds: tuple[str, ...]
    text: str
    # Random-byte cases: the damaged bytes, analyzed from a file on disk (decoding included).
    raw: bytes | None = None


@dataclass
class Outcome:
    case: Case
    result: str  # "ok", "error:<code>", "crash", "hang"
    seconds: float
    detail: str = ""


# -- mutations (each takes the text and a seeded Random, returns the damaged text) --------------


@cache
def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


@cache
def _tokens(text: str) -> list[tuple[int, int, int]]:
    """(start offset, end offset, token type) of every token of a valid source."""
    starts = [0]
    for line in _lines(text):
        starts.append(starts[-1] + len(line))
    out = []
    with contextlib.suppress(tokenize.TokenError, SyntaxError):
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in (tokenize.NAME, tokenize.OP, tokenize.NUMBER, tokenize.STRING):
                (sr, sc), (er, ec) = tok.start, tok.end
                out.append((starts[sr - 1] + sc, starts[er - 1] + ec, tok.type))
    return out


@cache
def _statements(text: str) -> list[tuple[int, int, int]]:
    """(first line, last line, column) of every statement inside a function, 1-based lines."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for stmt in ast.walk(node):
                if isinstance(stmt, ast.stmt) and stmt is not node and stmt.end_lineno:
                    out.append((stmt.lineno, stmt.end_lineno, stmt.col_offset))
    return out


def delete_lines(text: str, rng: random.Random) -> str:
    lines = list(_lines(text))
    for _ in range(rng.randint(1, 5)):
        if rng.random() < 0.3:  # a contiguous block
            start = rng.randrange(len(lines))
            del lines[start : start + rng.randint(2, 40)]
        elif lines:
            del lines[rng.randrange(len(lines))]
    return "".join(lines)


def delete_statement(text: str, rng: random.Random) -> str:
    """A whole statement inside a function goes (replaced by `pass`): the file still parses."""
    first, last, col = rng.choice(_statements(text))
    lines = list(_lines(text))
    lines[first - 1 : last] = [" " * col + "pass\n"]
    return "".join(lines)


def swap_names(text: str, rng: random.Random) -> str:
    """One identifier becomes another identifier of the file (usually still valid Python)."""
    names = [t for t in _tokens(text) if t[2] == tokenize.NAME]
    out = text
    for start, end, _ in sorted(rng.sample(names, rng.randint(1, 4)), reverse=True):
        other_start, other_end, _ = rng.choice(names)
        out = out[:start] + text[other_start:other_end] + out[end:]
    return out


def swap_tokens(text: str, rng: random.Random) -> str:
    """Two tokens of any kind trade places."""
    tokens = _tokens(text)
    a, b = sorted(rng.sample(range(len(tokens)), 2))
    (sa, ea, _), (sb, eb, _) = tokens[a], tokens[b]
    return text[:sa] + text[sb:eb] + text[ea:sb] + text[sa:ea] + text[eb:]


def truncate(text: str, rng: random.Random) -> str:
    return text[: rng.randrange(len(text))]


def damage_indentation(text: str, rng: random.Random) -> str:
    lines = list(_lines(text))
    for _ in range(rng.randint(1, 6)):
        i = rng.randrange(len(lines))
        body = lines[i].lstrip(" \t")
        indent = len(lines[i]) - len(body)
        choice = rng.randrange(4)
        if choice == 0:
            lines[i] = " " * max(indent + rng.choice([-4, -2, -1, 1, 2, 4]), 0) + body
        elif choice == 1:
            lines[i] = "\t" * (indent // 4) + body
        elif choice == 2:
            lines[i] = body
        else:  # a whole block shifted
            for j in range(i, min(i + rng.randint(2, 30), len(lines))):
                lines[j] = "    " + lines[j]
    return "".join(lines)


_ODD = ["\x00", "\r", "\x0c", "\t", "\v", "\u2028", "\u2029", "\ufeff", "\x85", "\\", "é", "😋"]


def insert_bytes(text: str, rng: random.Random) -> str:
    raw = bytearray(text.encode("utf-8"))
    for _ in range(rng.randint(1, 8)):
        at = rng.randrange(len(raw) + 1)
        if rng.random() < 0.5:
            raw[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        else:
            raw[at:at] = rng.choice(_ODD).encode("utf-8")
    return raw.decode("utf-8", "replace")  # what an editor shows for undecodable bytes


def _deep(depth: int, rng: random.Random, indent: str) -> str:
    x = "hidden_states"
    shapes: list[Callable[[], str]] = [
        lambda: f"{x} = " + "(" * depth + x + ")" * depth,
        lambda: f"{x} = " + " + ".join([x] * depth),
        lambda: f"{x} = {x}" + ".attr" * depth,
        lambda: f"{x} = " + "f(" * depth + x + ")" * depth,
        lambda: f"{x} = {x}" + "[0]" * depth,
        lambda: f"{x} = " + "-" * depth + x,
        lambda: f"{x} = " + "not " * depth + x,
        lambda: f"{x} = " + "[" * depth + x + "]" * depth,
        lambda: f"{x} = " + "lambda: " * depth + x,
        lambda: f"{x} = " + " if c else ".join([x] * depth),
        lambda: f"{x} = " + "{'k': " * depth + x + "}" * depth,
        lambda: f"{x} = {x}" + "()" * depth,
        lambda: f"{x} = " + " < ".join([x] * depth),
    ]
    if depth <= 120:  # Python refuses more than 100 indentation levels; go just past it
        shapes += [
            lambda: (
                "".join(
                    f"{indent}{'    ' * i}if {x} is not None:\n" for i in range(depth)
                ).removeprefix(indent)
                + f"{indent}{'    ' * depth}{x} = self.proj_out({x})"
            ),
            lambda: (
                "".join(
                    f"{indent}{'    ' * i}for block in self.transformer_blocks:\n"
                    for i in range(depth)
                ).removeprefix(indent)
                + f"{indent}{'    ' * depth}{x} = block({x})"
            ),
            lambda: (
                "".join(
                    f"{indent}{'    ' * i}def f{i}(self, {x}):\n" for i in range(depth)
                ).removeprefix(indent)
                + f"{indent}{'    ' * depth}return {x}"
            ),
        ]
    return rng.choice(shapes)()


def deep_nesting(text: str, rng: random.Random) -> str:
    """A deeply nested expression or block inserted before a statement inside a function."""
    first, _last, col = rng.choice(_statements(text))
    depth = rng.choice([10, 30, 60, 99, 101, 150, 300, 1000, 3000])
    indent = " " * col
    lines = list(_lines(text))
    lines.insert(first - 1, indent + _deep(depth, rng, indent) + "\n")
    return "".join(lines)


def duplicate_block(text: str, rng: random.Random) -> str:
    lines = list(_lines(text))
    start = rng.randrange(len(lines))
    block = lines[start : start + rng.randint(1, 60)]
    at = rng.randrange(len(lines) + 1)
    lines[at:at] = block * rng.randint(1, 3)
    return "".join(lines)


MUTATIONS: dict[str, Callable[[str, random.Random], str]] = {
    "delete_lines": delete_lines,
    "delete_statement": delete_statement,
    "swap_names": swap_names,
    "swap_tokens": swap_tokens,
    "truncate": truncate,
    "indentation": damage_indentation,
    "random_bytes": insert_bytes,
    "deep_nesting": deep_nesting,
    "duplicate_block": duplicate_block,
}


@cache
def _source(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def make_case(seed: int, number: int, files: list[Path]) -> Case:
    """Case `number` of campaign `seed` (the same pair always gives the same case)."""
    rng = random.Random(f"{seed}:{number}")
    path = rng.choice(files)
    original = _source(path)
    names = list(MUTATIONS)
    kinds = (
        tuple(rng.sample(names, rng.randint(2, 3)))
        if rng.random() < 0.2
        else (names[number % len(names)],)
    )
    text = original
    for kind in kinds:
        # Mutations that need a valid source (tokens, statements) read the original file.
        base = text if kind not in ("delete_statement", "swap_tokens", "swap_names") else original
        if kind == "deep_nesting" and text is not original:
            base = original
        text = MUTATIONS[kind](base, rng)
    raw = None
    if "random_bytes" in kinds and rng.random() < 0.25:
        data = bytearray(text.encode("utf-8", "replace"))
        at = rng.randrange(len(data) + 1)
        data[at:at] = bytes([rng.choice([0x80, 0xFF, 0xC3, 0x00])])
        raw = bytes(data)
    return Case(number, path, kinds, text, raw)


# -- running ------------------------------------------------------------------------------------


class CaseTimeout(BaseException):
    """Raised in the analysis when a case runs past its bound (BaseException: nothing in the
    analysis may swallow it)."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: object) -> None:
        raise CaseTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_case(case: Case, bound: float = DEFAULT_BOUND_S, scratch: Path | None = None) -> Outcome:
    started = time.perf_counter()
    try:
        with deadline(bound):
            result = _analyze(case, scratch)
    except CaseTimeout:
        return Outcome(case, "hang", time.perf_counter() - started, f"over {bound} s")
    except Exception:
        return Outcome(case, "crash", time.perf_counter() - started, traceback.format_exc())
    return Outcome(case, result, time.perf_counter() - started)


def _analyze(case: Case, scratch: Path | None) -> str:
    path, text = case.path, case.text
    try:
        if case.raw is not None:
            assert scratch is not None, "random-byte cases on disk need a scratch folder"
            path = scratch / case.path.name
            path.write_bytes(case.raw)
            report = analyze_path(path).to_json()
            text = case.raw.decode("utf-8", "replace")
        else:
            report = analyze_path(path, text=text).to_json()
    except AnalysisError as exc:
        if not exc.message or "\n" in exc.message:
            raise AssertionError(f"error message is not one line: {exc.message!r}") from None
        return f"error:{exc.code}"
    json.dumps(report, allow_nan=False)  # strict JSON: the CLI and the editor read it
    lines = LineIndex(text, CODEC)
    build_diagnostics(report, str(path), lines)
    build_anchors(report, str(path), lines)
    return "ok"


@dataclass
class Campaign:
    seed: int
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0
    # Cases over the bound on the first run only (then within it): load, not a hang.
    retried: list[int] = field(default_factory=list)

    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.result in ("crash", "hang")]

    def summary(self) -> dict[str, object]:
        results = Counter(o.result.split(":")[0] for o in self.outcomes)
        errors = Counter(o.result[6:] for o in self.outcomes if o.result.startswith("error:"))
        kinds = Counter(k for o in self.outcomes for k in o.case.kinds)
        times = sorted(o.seconds for o in self.outcomes)
        return {
            "seed": self.seed,
            "cases": len(self.outcomes),
            "ok": results["ok"],
            "clean_errors": results["error"],
            "crashes": results["crash"],
            "hangs": results["hang"],
            "over_bound_once": len(self.retried),
            "error_codes": dict(errors.most_common()),
            "mutations": dict(kinds.most_common()),
            "seconds": round(self.seconds, 1),
            "case_seconds_median": round(times[len(times) // 2], 3) if times else 0,
            "case_seconds_max": round(times[-1], 3) if times else 0,
        }


def campaign(
    seed: int,
    cases: int,
    bound: float = DEFAULT_BOUND_S,
    progress: Callable[[Outcome], None] | None = None,
) -> Campaign:
    files = transformer_sources()
    out = Campaign(seed)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cdit-fuzz-") as scratch:
        for number in range(cases):
            case = make_case(seed, number, files)
            outcome = run_case(case, bound, Path(scratch))
            if outcome.result == "hang":
                # Over the bound once can be a load spike on a shared machine: a hang must repeat.
                again = run_case(case, bound, Path(scratch))
                if again.result != "hang":
                    out.retried.append(number)
                    outcome = again
            out.outcomes.append(outcome)
            if progress:
                progress(outcome)
    out.seconds = time.perf_counter() - started
    return out


def describe(outcome: Outcome) -> str:
    case = outcome.case
    name = case.path.name
    head = f"case {case.number} ({'+'.join(case.kinds)} of {name}): {outcome.result}"
    return f"{head} after {outcome.seconds:.2f} s\n{outcome.detail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.analyzer_fuzz", description=__doc__)
    parser.add_argument("--cases", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--bound", type=float, default=DEFAULT_BOUND_S, help="seconds per case")
    parser.add_argument("--case", type=int, help="replay this one case and print it")
    parser.add_argument("--failures", type=Path, help="write each failing case's text here")
    args = parser.parse_args(argv)
    if args.case is not None:
        case = make_case(args.seed, args.case, transformer_sources())
        with tempfile.TemporaryDirectory() as scratch:
            outcome = run_case(case, args.bound, Path(scratch))
        print(describe(outcome))
        return 0 if outcome.result not in ("crash", "hang") else 1

    def progress(outcome: Outcome) -> None:
        if outcome.result in ("crash", "hang"):
            print(describe(outcome), file=sys.stderr)
        if (outcome.case.number + 1) % 500 == 0:
            print(f"{outcome.case.number + 1} cases", file=sys.stderr)

    result = campaign(args.seed, args.cases, args.bound, progress)
    if args.failures:
        args.failures.mkdir(parents=True, exist_ok=True)
        for outcome in result.failures():
            name = f"seed{args.seed}-case{outcome.case.number}-{outcome.result}"
            (args.failures / f"{name}.py").write_text(outcome.case.text, encoding="utf-8")
            (args.failures / f"{name}.txt").write_text(describe(outcome), encoding="utf-8")
    print(json.dumps(result.summary(), indent=2))
    return 1 if result.failures() else 0


if __name__ == "__main__":
    sys.exit(main())
