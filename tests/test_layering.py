"""Layering: analysis imports no torch, diffusers or pygls; the contract imports the standard
library only; importing the packages does no work."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import diffusers_file


def _modules_after(code: str) -> set[str]:
    script = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_analysis_imports_no_heavy_packages():
    flux = diffusers_file("models/transformers/transformer_flux.py")
    mods = _modules_after(
        "from lsp_server.analysis import analyze_path\n"
        f"analyze_path({str(flux)!r}, 'FluxTransformer2DModel').to_json()"
    )
    heavy = {m.split(".")[0] for m in mods} & {
        "torch",
        "diffusers",
        "transformers",
        "pygls",
        "lsprotocol",
        "cache_dit",
        "libcst",
    }
    assert not heavy


def test_the_contract_imports_the_standard_library_only():
    mods = _modules_after(
        "import cdit_runtime.contract, cdit_runtime.contract.worker, "
        "cdit_runtime.contract.schema_check"
    ) - _modules_after("")
    assert "cdit_runtime.contract.worker" in mods
    outside = {m.split(".")[0] for m in mods if not m.startswith("cdit_runtime")}
    assert not outside - set(sys.stdlib_module_names)
    runtime = {m for m in mods if m.startswith("cdit_runtime")}
    assert all(
        m in ("cdit_runtime", "cdit_runtime.contract") or m.startswith("cdit_runtime.contract.")
        for m in runtime
    ), runtime


def test_importing_packages_has_no_side_effects():
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import lsp_server, lsp_server.analysis, cdit_runtime, cdit_runtime.contract",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout == "" and out.stderr == ""
