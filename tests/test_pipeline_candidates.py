"""Without a model_index.json the gate check still knows the pipeline: the installed diffusers
pipelines that declare the transformer class as a component (read as text, nothing imported)."""

from __future__ import annotations

import asyncio
import sys
from types import SimpleNamespace

from lsp_server.analysis.pipeline.candidates import pipelines_using
from lsp_server.features.commands import HANDLERS, PIPELINE_CANDIDATES, ClassArgs


def test_the_pipelines_that_take_a_transformer_class() -> None:
    before = set(sys.modules)
    flux = pipelines_using("FluxTransformer2DModel")
    assert "diffusers" not in set(sys.modules) - before  # read, not imported
    names = [c["className"] for c in flux]
    assert names[0] == "FluxPipeline"  # the plain pipeline first
    assert "FluxImg2ImgPipeline" in names and len(names) <= 8
    assert all(c["path"].endswith(".py") and c["module"].startswith("diffusers.") for c in flux)
    video = [c["className"] for c in pipelines_using("SanaVideoTransformer3DModel")]
    assert video[0] == "SanaVideoPipeline"
    assert pipelines_using("NoSuchTransformerModel") == []


def test_the_server_command() -> None:
    class FakeServer(SimpleNamespace):
        async def in_worker(self, fn):
            return fn()

    handler = HANDLERS[PIPELINE_CANDIDATES]
    reply = asyncio.run(handler(FakeServer(), ClassArgs("WanTransformer3DModel")))
    assert reply["candidates"][0]["className"] == "WanPipeline"
