"""Failures map to their cause: real exceptions from real code, classified with a next step.

A copied source with relative imports, a pipeline's own argument check, a call with an argument
``__call__`` lacks, and cache-dit applying another model's registered adapter each get their own
code and hint; a hint never leaves the ``<outputDir>`` placeholder unfilled.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from cdit_runtime.errors import HINTS, classify
from tests.runtime_cli import verify

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")


def _raised(fn) -> BaseException:
    try:
        fn()
    except Exception as exc:  # the exception as the worker would catch it
        return exc
    raise AssertionError("nothing was raised")


def test_a_copied_source_with_relative_imports(tmp_path: Path) -> None:
    source = tmp_path / "transformer_copied.py"
    source.write_text("from ..attention import AttentionMixin\n\nclass X:\n    pass\n")
    spec = importlib.util.spec_from_file_location("transformer_copied", source)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    info = classify(_raised(lambda: spec.loader.exec_module(module)))
    assert info.code == "SOURCE_IMPORT"
    assert "installed module" in info.hint and "relative" in info.hint


def test_the_pipelines_own_argument_check(tmp_path: Path) -> None:
    from diffusers import FluxPipeline

    from cdit_runtime.tiny_pipelines import ensure_tiny

    folder = tmp_path / "flux"
    ensure_tiny("flux", folder)
    pipe = FluxPipeline.from_pretrained(folder)
    pipe.set_progress_bar_config(disable=True)
    embeds = torch.zeros(1, 4, 8)
    # FluxPipeline.check_inputs refuses a prompt and prompt embeddings together
    info = classify(_raised(lambda: pipe(prompt="x", prompt_embeds=embeds, num_inference_steps=1)))
    assert info.code == "PIPELINE_CALL"
    assert "--call-arg" in info.hint and "check_inputs" in (info.traceback or "")
    # an argument __call__ does not take
    info = classify(_raised(lambda: pipe(prompt="x", num_frames=3, num_inference_steps=1)))
    assert info.code == "PIPELINE_CALL", info.message


def test_another_models_registered_adapter() -> None:
    import cache_dit
    from diffusers import DiffusionPipeline, FluxTransformer2DModel

    class SanaVideoPipeline(DiffusionPipeline):  # 'Sana' is registered in cache-dit
        def __init__(self, transformer) -> None:
            super().__init__()
            self.register_modules(transformer=transformer)

    transformer = FluxTransformer2DModel(
        patch_size=1,
        in_channels=4,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=8,
        num_attention_heads=2,
        joint_attention_dim=8,
        pooled_projection_dim=8,
        axes_dims_rope=[2, 2, 4],
    )
    exc = _raised(lambda: cache_dit.enable_cache(SanaVideoPipeline(transformer)))
    if not isinstance(exc, AssertionError):
        pytest.skip(f"this cache-dit does not assert here: {exc!r}")
    info = classify(exc)
    assert info.code == "REGISTERED_ADAPTER"
    assert "standalone target" in info.hint and "CDIT202" in info.hint


def test_a_run_the_pipeline_refuses_names_that_cause(tmp_path: Path) -> None:
    """The baseline through the real CLI with arguments the pipeline refuses."""
    run = verify(
        tmp_path,
        "--tiny",
        "flux",
        "--phases",
        "baseline",
        "--call-arg",
        "prompt_embeds=[[[0.0]]]",
        timeout=600,
    )
    baseline = run.phase("baseline")
    assert baseline["status"] == "failed"
    assert baseline["error"]["code"] == "PIPELINE_CALL", baseline["error"]


def test_hints_name_the_runs_own_folder(tmp_path: Path) -> None:
    from cdit_runtime.contract import load_request
    from cdit_runtime.controller import Controller
    from cdit_runtime.errors import error_info

    assert "<outputDir>" in HINTS["PHASE_FAILED"]
    request = load_request(
        {
            "model": {"source": "tiny", "family": "flux"},
            "outputDir": str(tmp_path / "run"),
            "phases": [],
        }
    )
    controller = Controller(request)
    controller.result.error = error_info("WORKER_DIED", "rank 1 was killed")
    controller.write()
    written = json.loads((tmp_path / "run" / "results.json").read_text())
    assert "<outputDir>" not in json.dumps(written)
    assert str(tmp_path / "run" / "logs") in written["error"]["hint"]
