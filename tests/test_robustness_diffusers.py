"""The analyzer over every .py file of the installed diffusers: a result or a clear one-line
error for each, no crash. (Speed is measured by `benchmarks/analysis_speed.py`, not asserted
here: the slowest file, `unets/unet_2d_blocks.py`, takes 0.6-1.3 s on these shared cores.)"""

from __future__ import annotations

from lsp_server.analysis import AnalysisError, analyze_path
from tests.conftest import diffusers_root


def test_every_diffusers_file_gets_a_result_or_a_clear_error():
    files = sorted(diffusers_root().rglob("*.py"))
    assert len(files) > 500
    crashes: list[str] = []
    outcomes = {"ok": 0}
    for path in files:
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
    assert not crashes, "\n".join(crashes[:20])
    # Every transformer file in models/transformers with a block loop is recognized.
    assert outcomes["ok"] >= 70, outcomes
