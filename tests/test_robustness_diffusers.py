"""The analyzer over every .py file of the installed diffusers: no crash, no file over 1 s."""

from __future__ import annotations

import gc
import time

from lsp_server.analysis import AnalysisError, analyze_path
from tests.conftest import diffusers_root

MAX_SECONDS = 1.0


def test_every_diffusers_file_gets_a_result_or_a_clear_error():
    files = sorted(diffusers_root().rglob("*.py"))
    assert len(files) > 500
    slow, crashes, outcomes = [], [], {"ok": 0}
    gc.disable()  # collector pauses caused by earlier files are not this file's analysis time
    try:
        _analyze_all(files, slow, crashes, outcomes)
    finally:
        gc.enable()
    assert not crashes, "\n".join(crashes[:20])
    assert not slow, "\n".join(slow)
    # Every transformer file in models/transformers with a block loop is recognized.
    assert outcomes["ok"] >= 70, outcomes


def _analyze_all(files, slow, crashes, outcomes):
    for index, path in enumerate(files):
        if index % 100 == 0:
            gc.collect()
        start = time.perf_counter()
        try:
            result = analyze_path(path, registry=False)
            doc = result.to_json()
            assert doc["transformers"], path
            outcomes["ok"] += 1
        except AnalysisError as exc:
            assert exc.message and "\n" not in exc.message
            outcomes[exc.code] = outcomes.get(exc.code, 0) + 1
        except Exception as exc:  # a crash is what this test exists to catch
            crashes.append(f"{path}: {type(exc).__name__}: {exc}")
        elapsed = time.perf_counter() - start
        if elapsed > MAX_SECONDS:
            slow.append(f"{path}: {elapsed:.2f} s")
