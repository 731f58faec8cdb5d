"""Tests for `lsp_server.analysis.pipeline.infer_separate_cfg`.

Real diffusers pipeline files are located with `importlib.util.find_spec` and read as text; the
diffusers pipelines themselves are never imported. Synthetic third-party pipelines are written to
`tmp_path` so that the structural rules are exercised without any diffusers naming.
"""

from __future__ import annotations

import importlib.util
import pathlib
import textwrap
import time

import pytest

from lsp_server.analysis.model import SeparateCfg
from lsp_server.analysis.pipeline import infer_separate_cfg


def _diffusers_pipelines() -> pathlib.Path | None:
    spec = importlib.util.find_spec("diffusers")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = pathlib.Path(next(iter(spec.submodule_search_locations))) / "pipelines"
    return root if root.is_dir() else None


PIPELINES = _diffusers_pipelines()
needs_diffusers = pytest.mark.skipif(PIPELINES is None, reason="diffusers is not installed")


def _real(rel: str) -> pathlib.Path:
    assert PIPELINES is not None
    path = PIPELINES / rel
    if not path.is_file():
        pytest.skip(f"{rel} is not in this diffusers version")
    return path


def _line(path: pathlib.Path, line: int) -> str:
    return path.read_text(encoding="utf-8").splitlines()[line - 1]


def _write(tmp_path: pathlib.Path, source: str, name: str = "pipeline_custom.py") -> pathlib.Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------------
# Real diffusers pipelines


@needs_diffusers
@pytest.mark.parametrize(
    ("rel", "expected"),
    [
        # two sequential transformer calls, the second under a guard True by default
        ("cogview4/pipeline_cogview4.py", True),
        ("skyreels_v2/pipeline_skyreels_v2.py", True),
        # `current_model = self.transformer if ... else self.transformer_2`, called twice
        ("wan/pipeline_wan.py", True),
        # `do_true_cfg = true_cfg_scale > 1 and has_neg_prompt`: 4.0 > 1 and unknown -> possible
        ("qwenimage/pipeline_qwenimage.py", True),
        # same shape, but true_cfg_scale defaults to 1.0 -> the second call is off by default
        ("flux/pipeline_flux.py", False),
        ("hunyuan_video/pipeline_hunyuan_video.py", False),
        # batched CFG: torch.cat([latents] * 2), one call, noise_pred.chunk(2)
        ("mochi/pipeline_mochi.py", False),
        ("cogvideo/pipeline_cogvideox.py", False),
        # batched CFG plus an optional skip-layer-guidance call: still one cond/uncond call
        ("stable_diffusion_3/pipeline_stable_diffusion_3.py", False),
        # guider objects: one transformer call per guidance batch in an inner loop
        ("hunyuan_video1_5/pipeline_hunyuan_video1_5.py", True),
        # guidance-distilled: one call, no CFG branch at all
        ("flux2/pipeline_flux2.py", False),
        # composite pipeline: __call__ runs sub-pipelines imported from sibling files
        ("visualcloze/pipeline_visualcloze_combined.py", False),
    ],
)
def test_real_pipelines(rel: str, expected: bool) -> None:
    path = _real(rel)
    result = infer_separate_cfg(path)
    assert isinstance(result, SeparateCfg)
    assert result.value is expected, [e.message for e in result.evidence]
    assert 0.0 < result.confidence <= 1.0
    assert result.evidence
    for ev in result.evidence:
        assert ev.line >= 1
        assert pathlib.Path(ev.path).is_file()


@needs_diffusers
def test_flux_evidence_points_at_the_skipped_call_and_its_guard() -> None:
    path = _real("flux/pipeline_flux.py")
    result = infer_separate_cfg(path)
    assert result.value is False
    skipped = [e for e in result.evidence if "skipped" in e.message]
    assert skipped, [e.message for e in result.evidence]
    assert "self.transformer(" in _line(path, skipped[0].line)
    assert "do_true_cfg" in skipped[0].message
    # the default that decides it is cited at its own line
    defaults = [e for e in result.evidence if "true_cfg_scale" in e.message and "1.0" in e.message]
    assert defaults and "true_cfg_scale" in _line(path, defaults[0].line)


@needs_diffusers
def test_batched_cfg_evidence_names_cat_and_chunk_lines() -> None:
    path = _real("mochi/pipeline_mochi.py")
    result = infer_separate_cfg(path)
    assert result.value is False
    cat = [e for e in result.evidence if "batched" in e.message and "input" in e.message]
    chunk = [e for e in result.evidence if "split" in e.message]
    assert cat and "torch.cat([latents] * 2)" in _line(path, cat[0].line)
    assert chunk and ".chunk(2)" in _line(path, chunk[0].line)


@needs_diffusers
def test_second_call_with_guard_true_by_default_is_cited() -> None:
    path = _real("wan/pipeline_wan.py")
    result = infer_separate_cfg(path)
    calls = [e for e in result.evidence if e.message.startswith("denoiser call #")]
    assert len(calls) == 2
    assert all("current_model(" in _line(path, e.line) for e in calls)


@needs_diffusers
def test_source_argument_overrides_the_file(tmp_path: pathlib.Path) -> None:
    path = _real("flux/pipeline_flux.py")
    text = path.read_text(encoding="utf-8").replace(
        "true_cfg_scale: float = 1.0", "true_cfg_scale: float = 4.0"
    )
    assert text != path.read_text(encoding="utf-8")
    # defaults 4.0 -> `4.0 > 1 and has_neg_prompt` may be true -> the second call counts
    assert infer_separate_cfg(path, source=text).value is True
    assert infer_separate_cfg(path).value is False


@needs_diffusers
def test_fast_on_real_pipelines() -> None:
    path = _real("qwenimage/pipeline_qwenimage.py")
    infer_separate_cfg(path)  # warm the file cache
    start = time.perf_counter()
    for _ in range(5):
        infer_separate_cfg(path)
    assert (time.perf_counter() - start) / 5 < 0.2  # budget is 20 ms; leave room for slow CI


# --------------------------------------------------------------------------------------------------
# Synthetic third-party pipelines


_ALIAS = """
import torch
from diffusers import DiffusionPipeline


class TwoExpertPipeline(DiffusionPipeline):
    def __init__(self, transformer, transformer_2, vae, text_encoder, scheduler):
        super().__init__()
        self.register_modules(
            transformer=transformer, transformer_2=transformer_2, vae=vae,
            text_encoder=text_encoder, scheduler=scheduler,
        )

    @property
    def do_classifier_free_guidance(self):
        return float(self._guidance_scale) > 1.0

    def __call__(self, prompt=None, guidance_scale: float = {scale}, boundary=None):
        self._guidance_scale = guidance_scale
        cond, uncond = self.text_encoder(prompt)
        latents = torch.randn(1, 4, 64, 64)
        for i, t in enumerate(self.scheduler.timesteps):
            if boundary is None or t >= boundary:
                current_model = self.transformer
            else:
                current_model = self.transformer_2
            noise_pred = current_model(latents, t, cond)
            if self.do_classifier_free_guidance:
                noise_uncond = current_model(latents, t, uncond)
                noise_pred = noise_uncond + guidance_scale * (noise_pred - noise_uncond)
            latents = self.scheduler.step(noise_pred, t, latents).prev_sample
        return self.vae.decode(latents)
"""


@pytest.mark.parametrize(("scale", "expected"), [("5.0", True), ("1.0", False)])
def test_alias_current_model(tmp_path: pathlib.Path, scale: str, expected: bool) -> None:
    path = _write(tmp_path, _ALIAS.replace("{scale}", scale))
    result = infer_separate_cfg(path)
    assert result.value is expected
    calls = [e for e in result.evidence if e.message.startswith("denoiser call")]
    assert calls and all("current_model(" in _line(path, e.line) for e in calls)


_HELPER = """
class StudioPipeline:
    def __init__(self, dit, vae, scheduler):
        self.dit = dit
        self.vae = vae
        self.scheduler = scheduler

    def _denoise(self, latents, timesteps, cfg_scale, cond, uncond):
        for t in self.progress_bar(timesteps):
            pred = self.dit(latents, t, cond)
            if cfg_scale > 1.0:
                pred_uncond = self.dit(latents, t, uncond)
                pred = pred_uncond + cfg_scale * (pred - pred_uncond)
            latents = self.scheduler.step(pred, t, latents).prev_sample
        return latents

    def __call__(self, cond, uncond, latents, cfg_scale: float = {scale}):
        timesteps = self.scheduler.timesteps
        latents = self._denoise(latents, timesteps, cfg_scale, cond, uncond)
        return self.vae.decode(latents)
"""


@pytest.mark.parametrize(("scale", "expected"), [("6.0", True), ("1.0", False)])
def test_helper_method_loop(tmp_path: pathlib.Path, scale: str, expected: bool) -> None:
    path = _write(tmp_path, _HELPER.replace("{scale}", scale))
    result = infer_separate_cfg(path)
    assert result.value is expected, [e.message for e in result.evidence]
    loop = result.evidence[0]
    assert "for t in self.progress_bar(timesteps)" in _line(path, loop.line)


_BATCHED = """
import torch


class BatchedPipeline(DiffusionPipeline):
    def __init__(self, transformer, scheduler):
        self.register_modules(transformer=transformer, scheduler=scheduler)

    def __call__(self, embeds, negative_embeds, latents, guidance_scale: float = 7.5):
        do_cfg = guidance_scale > 1.0
        if do_cfg:
            embeds = torch.cat([negative_embeds, embeds])
        for t in self.scheduler.timesteps:
            latent_model_input = torch.cat([latents] * 2) if do_cfg else latents
            noise_pred = self.transformer(latent_model_input, t, embeds)[0]
            if do_cfg:
                uncond, cond = noise_pred.chunk(2)
                noise_pred = uncond + guidance_scale * (cond - uncond)
            latents = self.scheduler.step(noise_pred, t, latents).prev_sample
        return latents
"""


def test_batched_cat_and_chunk(tmp_path: pathlib.Path) -> None:
    path = _write(tmp_path, _BATCHED)
    result = infer_separate_cfg(path)
    assert result.value is False
    lines = {_line(path, e.line).strip() for e in result.evidence}
    assert any(line.startswith("latent_model_input = torch.cat([latents] * 2)") for line in lines)
    assert any(".chunk(2)" in line for line in lines)


def test_batched_repeat_with_an_extra_guidance_pass_stays_false(tmp_path: pathlib.Path) -> None:
    source = """
    class RepeatPipeline(DiffusionPipeline):
        def __init__(self, transformer, scheduler):
            self.register_modules(transformer=transformer, scheduler=scheduler)

        def __call__(self, latents, embeds, stg_scale: float = 1.0):
            for t in self.scheduler.timesteps:
                x = latents.repeat(2, 1, 1, 1)
                pred = self.transformer(x, t, embeds)
                uncond, cond = pred.chunk(2, dim=0)
                if stg_scale > 0:
                    perturbed = self.transformer(latents, t, embeds, skip_layers=[7])
                    cond = cond + stg_scale * (cond - perturbed)
                latents = self.scheduler.step(cond, t, latents).prev_sample
            return latents
    """
    result = infer_separate_cfg(_write(tmp_path, source))
    assert result.value is False
    assert result.confidence < 0.9  # several calls per step: flagged as less certain


_EXCLUSIVE = """
class BranchPipeline(DiffusionPipeline):
    def __init__(self, transformer, scheduler):
        self.register_modules(transformer=transformer, scheduler=scheduler)

    def __call__(self, latents, embeds, image=None):
        for t in self.scheduler.timesteps:
            if image is not None:
                noise_pred = self.transformer(latents, t, embeds, image_cond=image)
            else:
                noise_pred = self.transformer(latents, t, embeds)
            latents = self.scheduler.step(noise_pred, t, latents).prev_sample
        return latents
"""


def test_if_else_exclusive_calls_count_once(tmp_path: pathlib.Path) -> None:
    result = infer_separate_cfg(_write(tmp_path, _EXCLUSIVE))
    assert result.value is False, [e.message for e in result.evidence]


def test_sequential_calls_under_unknown_guard_count_twice(tmp_path: pathlib.Path) -> None:
    # the same branches, but as two `if`s that may both run -> two calls are possible
    source = _EXCLUSIVE.replace(
        "            else:\n                noise_pred = self.transformer(latents, t, embeds)",
        "            if image is None or t > 0:\n"
        "                noise_pred = self.transformer(latents, t, embeds)",
    )
    assert source != _EXCLUSIVE
    result = infer_separate_cfg(_write(tmp_path, source))
    assert result.value is True


def test_guider_inner_loop(tmp_path: pathlib.Path) -> None:
    source = """
    class GuidedPipeline(DiffusionPipeline):
        def __init__(self, transformer, guider, scheduler):
            self.register_modules(transformer=transformer, guider=guider, scheduler=scheduler)

        def __call__(self, latents, embeds, negative_embeds=None):
            for i, t in enumerate(self.scheduler.timesteps):
                self.guider.set_state(step=i, timestep=t)
                guider_state = self.guider.prepare_inputs({"embeds": (embeds, negative_embeds)})
                for batch in guider_state:
                    batch.noise_pred = self.transformer(latents, t, batch.embeds)
                noise_pred = self.guider(guider_state)[0]
                latents = self.scheduler.step(noise_pred, t, latents).prev_sample
            return latents
    """
    path = _write(tmp_path, source)
    result = infer_separate_cfg(path)
    assert result.value is True
    inner = [e for e in result.evidence if "guidance loop" in e.message]
    assert inner and "for batch in guider_state" in _line(path, inner[0].line)


def test_structural_denoiser_without_a_conventional_name(tmp_path: pathlib.Path) -> None:
    # no `transformer`/`unet`: the generator is found because its output feeds scheduler.step;
    # the mixer is called twice per step, but only to prepare the generator's inputs
    source = """
    class OddPipeline(DiffusionPipeline):
        def __init__(self, generator, mixer, scheduler):
            self.register_modules(generator=generator, mixer=mixer, scheduler=scheduler)

        def __call__(self, latents, cond, uncond, guidance: float = 1.0):
            for t in self.scheduler.timesteps:
                c = self.mixer(cond, t)
                u = self.mixer(uncond, t)
                eps = self.generator.forward(latents, t, c, u)
                latents = self.scheduler.step(eps, t, latents).prev_sample
            return latents
    """
    result = infer_separate_cfg(_write(tmp_path, source))
    assert result.value is False, [e.message for e in result.evidence]
    assert any("`generator`" in e.message for e in result.evidence)


def test_hint_selects_the_denoiser(tmp_path: pathlib.Path) -> None:
    source = """
    class TwoModelPipeline(DiffusionPipeline):
        def __init__(self, transformer, refiner, scheduler):
            self.register_modules(transformer=transformer, refiner=refiner, scheduler=scheduler)

        def __call__(self, latents, cond, uncond):
            for t in self.scheduler.timesteps:
                pred = self.transformer(latents, t, cond)
                a = self.refiner(pred, t, cond)
                b = self.refiner(pred, t, uncond)
                latents = self.scheduler.step(a + (a - b), t, latents).prev_sample
            return latents
    """
    path = _write(tmp_path, source)
    assert infer_separate_cfg(path).value is False
    assert infer_separate_cfg(path, transformer_attr_hint="refiner").value is True


def test_no_denoising_loop_gives_none(tmp_path: pathlib.Path) -> None:
    source = """
    class OneShotPipeline(DiffusionPipeline):
        def __init__(self, transformer, vae):
            self.register_modules(transformer=transformer, vae=vae)

        def __call__(self, latents, cond):
            sample = self.transformer(latents, cond)
            return self.vae.decode(sample)
    """
    result = infer_separate_cfg(_write(tmp_path, source))
    assert result.value is None
    assert result.evidence and "loop" in result.evidence[0].message
    assert result.confidence == 0.0


def test_file_without_pipeline_class_and_unparsable_file(tmp_path: pathlib.Path) -> None:
    empty = infer_separate_cfg(_write(tmp_path, "X = 1\n", "a.py"))
    assert empty.value is None and empty.evidence
    broken = infer_separate_cfg(_write(tmp_path, "class P:\n    def __call__(self:\n", "b.py"))
    assert broken.value is None and "parse" in broken.evidence[0].message
    missing = infer_separate_cfg(tmp_path / "missing.py")
    assert missing.value is None and missing.evidence[0].path == str(tmp_path / "missing.py")


def test_result_serializes(tmp_path: pathlib.Path) -> None:
    doc = infer_separate_cfg(_write(tmp_path, _BATCHED)).to_json()
    assert doc["value"] is False
    assert all({"message", "path", "line"} <= set(e) for e in doc["evidence"])
