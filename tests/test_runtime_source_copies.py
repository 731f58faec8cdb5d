"""A source file that copies a library class (a diffusers transformer copied into the workspace
to be edited) is the class that runs: the model folder's index names `diffusers`, yet the
runtime must load the component with the copy, whichever order the source files come in."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdit_runtime.contract import ModelSource
from cdit_runtime.loading import load_pipeline
from lsp_server.analysis.imports import absolute_imports
from lsp_server.analysis.sources import read_source
from tests.conftest import diffusers_file

TRANSFORMER = "models/transformers/transformer_longcat_audio_dit.py"
PIPELINE = "pipelines/longcat_audio_dit/pipeline_longcat_audio_dit.py"


def _copy(src: Path, dest: Path) -> Path:
    """Copy `src` out of the package and make its relative imports absolute (the gate check's
    "rewrite the imports" fix)."""
    dest.write_text(src.read_text())
    anchor = read_source(dest).anchor
    assert anchor is not None
    dest.write_text(absolute_imports(dest.read_text(), anchor))
    return dest


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    from tests.new_models.longcat_audio import build

    root = tmp_path_factory.mktemp("copies")
    build(root / "model")
    _copy(diffusers_file(TRANSFORMER), root / "my_transformer.py")
    _copy(diffusers_file(PIPELINE), root / "my_pipeline.py")
    return root


@pytest.mark.parametrize(
    "order", [("my_transformer", "my_pipeline"), ("my_pipeline", "my_transformer")]
)
def test_the_copied_transformer_runs_not_the_installed_one(workspace, tmp_path, order):
    import torch

    source = ModelSource(
        source="local",
        path=str(workspace / "model"),
        pipeline_class="LongCatAudioDiTPipeline",
        source_files=[str(workspace / f"{name}.py") for name in order],
    )
    pipe, info = load_pipeline(source, str(tmp_path), torch.float32)
    assert type(pipe).__module__ == "my_pipeline"
    assert type(pipe.transformer).__module__ == "my_transformer"
    # the VAE has no copy: the installed class
    assert type(pipe.vae).__module__.startswith("diffusers.")
    assert info["componentsFromSources"] == {
        "transformer": "my_transformer.LongCatAudioDiTTransformer"
    }
    # the copy holds the folder's weights
    installed = pipe.transformer.state_dict()
    assert installed and all(torch.isfinite(v).all() for v in installed.values())
