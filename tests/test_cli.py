"""`cdit-integrate analyze`: readable report, JSON, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, diffusers_file


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lsp_server.cli", *args], capture_output=True, text=True, timeout=60
    )


def test_json_output_for_a_module_name():
    proc = run_cli(
        "analyze",
        "diffusers.models.transformers.transformer_flux",
        "--class",
        "FluxTransformer2DModel",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    (t,) = doc["transformers"]
    assert [b["attr"] for b in t["blockLists"]] == [
        "transformer_blocks",
        "single_transformer_blocks",
    ]


def test_readable_report_names_patterns_and_reasons():
    proc = run_cli("analyze", str(diffusers_file("models/transformers/dit_transformer_2d.py")))
    assert proc.returncode == 0, proc.stderr
    assert "DiTTransformer2DModel" in proc.stdout
    assert "ForwardPattern  Pattern_3" in proc.stdout
    assert "PatchFunctor: NEEDED" in proc.stdout


def test_pipeline_option_reports_separate_cfg():
    proc = run_cli(
        "analyze",
        str(diffusers_file("models/transformers/transformer_wan.py")),
        "--pipeline",
        str(diffusers_file("pipelines/wan/pipeline_wan.py")),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["transformers"][0]["separateCfg"]["value"] is True


def _bad_inputs(tmp: Path) -> dict[str, tuple[list[str], str]]:
    syntax = tmp / "broken.py"
    syntax.write_text("class A(:\n    pass\n")
    binary = tmp / "blob.py"
    binary.write_bytes(b"\x00\x01\x02binary")
    latin = tmp / "latin.py"
    latin.write_bytes("x = '\xe9'\n".encode("latin-1"))
    plain = tmp / "plain.py"
    plain.write_text("def f():\n    return 1\n")
    config = tmp / "config.json"
    config.write_text("{not json")
    demo = str(FIXTURES / "models" / "demo_mmdit.py")
    return {
        "missing file": (["analyze", str(tmp / "nope.py")], "no such file"),
        "syntax error": (["analyze", str(syntax)], "syntax error"),
        "binary file": (["analyze", str(binary)], "binary file"),
        "not utf-8": (["analyze", str(latin)], "not UTF-8"),
        "no transformer": (["analyze", str(plain)], "no transformer found"),
        "directory": (["analyze", str(tmp)], "not a regular file"),
        "unknown class": (["analyze", demo, "--class", "Nope"], "class Nope is not defined"),
        "bad config": (["analyze", demo, "--config", str(config)], "not a JSON config"),
        "unknown module": (["analyze", "no_such_pkg.models.thing"], "no such file"),
        "bad size": (["analyze", demo, "--cp-size", "0"], "must be a positive integer"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing file",
        "syntax error",
        "binary file",
        "not utf-8",
        "no transformer",
        "directory",
        "unknown class",
        "bad config",
        "unknown module",
        "bad size",
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, case):
    args, expected = _bad_inputs(tmp_path)[case]
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("cdit-integrate: error:") and expected in lines[0]
    assert "Traceback" not in proc.stderr
