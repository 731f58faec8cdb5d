"""The pipeline's `__call__` signature (`pipeline.callSignature` of the analyze JSON), read
statically from real diffusers pipelines and from a third-party pipeline written in an unusual
style: parameters, kinds, defaults (literals and constants), required flags, roles, inputs, and
the checks that raise (`use_resolution_binning` and the "Invalid sample size" of Sana/PixArt)."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from lsp_server.analysis import analyze_path
from lsp_server.analysis.pipeline.call_signature import (
    CallSignature,
    call_signatures,
    choose_signature,
    guess_role,
    ordered_signatures,
)
from lsp_server.analysis.report import render_report
from lsp_server.analysis.sources import read_source
from tests.conftest import diffusers_file

E2E = Path(__file__).resolve().parent.parent / "e2e" / "workspace"


def _signature(relative: str, class_name: str) -> CallSignature:
    sigs = call_signatures(read_source(diffusers_file(relative)))
    found = choose_signature(sigs, class_name)
    assert found is not None and found.class_name == class_name, [s.class_name for s in sigs]
    return found


def _param(sig: CallSignature, name: str):
    p = sig.parameter(name)
    assert p is not None, f"{name} not in {[q.name for q in sig.parameters]}"
    return p


def _roles(sig: CallSignature, role: str) -> list[str]:
    return [p.name for p in sig.parameters if p.role == role]


# --- real diffusers pipelines -------------------------------------------------------------------


def test_video_pipeline_num_frames_and_resolution():
    sig = _signature("pipelines/wan/pipeline_wan.py", "WanPipeline")
    frames = _param(sig, "num_frames")
    assert (frames.role, frames.default, frames.default_is_literal) == ("frames", 81, True)
    assert frames.annotation == "int" and frames.kind == "positional_or_keyword"
    assert not frames.required
    assert _roles(sig, "resolution") == ["height", "width"]
    assert _param(sig, "height").default == 480
    assert _roles(sig, "steps") == ["num_inference_steps"]
    assert "guidance_scale" in _roles(sig, "guidance")
    assert [p.name for p in sig.parameters if p.required] == []
    assert sig.parameter("self") is None  # self is not a call argument
    assert sig.var_keyword is None
    # the default of a list parameter is a JSON literal too
    tensor_inputs = _param(sig, "callback_on_step_end_tensor_inputs")
    assert tensor_inputs.default == ["latents"] and tensor_inputs.role is None
    # height/width divisibility is checked in check_inputs, with the parameters bound by name
    divisible = [c for c in sig.checks if set(c.params) == {"height", "width"}]
    assert divisible and divisible[0].method == "check_inputs"
    assert "divisible by 16" in (divisible[0].message or "")
    assert divisible[0].avoid is None


def test_video_pipeline_named_frames_and_resolution_binning():
    """SanaVideo takes `frames`, not `num_frames` (the runtime's num_frames is dropped), and
    raises "Invalid sample size" unless `use_resolution_binning=False` (issue 17)."""
    sig = _signature("pipelines/sana_video/pipeline_sana_video.py", "SanaVideoPipeline")
    assert _roles(sig, "frames") == ["frames"]
    assert _param(sig, "frames").default == 81
    binning = _param(sig, "use_resolution_binning")
    assert binning.default is True and binning.role is None  # a switch, not a resolution
    checks = [c for c in sig.checks if c.avoid]
    assert [c.avoid for c in checks] == [{"use_resolution_binning": False}]
    assert checks[0].message == "Invalid sample size" and checks[0].method == "__call__"
    # the long literal list default is kept as a literal
    assert isinstance(_param(sig, "complex_human_instruction").default, list)


def test_image_to_video_requires_an_image_input():
    sig = _signature("pipelines/wan/pipeline_wan_i2v.py", "WanImageToVideoPipeline")
    image = _param(sig, "image")
    assert image.required and not image.has_default and image.default_text is None
    assert (image.role, image.input_kind, image.annotation) == (
        "input",
        "image",
        "PipelineImageInput",
    )
    assert [p.name for p in sig.parameters if p.required] == ["image"]
    # tensors that are not media inputs get no role
    assert _param(sig, "image_embeds").role is None
    assert _param(sig, "latents").role is None


def test_audio_pipeline_duration():
    sig = _signature("pipelines/stable_audio/pipeline_stable_audio.py", "StableAudioPipeline")
    end = _param(sig, "audio_end_in_s")
    assert (end.role, end.has_default, end.default, end.default_is_literal) == (
        "duration",
        True,
        None,
        True,
    )
    assert "audio_start_in_s" in _roles(sig, "duration")
    waveforms = _param(sig, "initial_audio_waveforms")
    assert (waveforms.role, waveforms.input_kind) == ("input", "audio")
    # a sampling rate is a number, not an audio file
    assert _param(sig, "initial_audio_sampling_rate").role is None
    assert _param(sig, "num_waveforms_per_prompt").role is None
    # the duration limits are checks on the duration parameters
    assert any(set(c.params) == {"audio_start_in_s", "audio_end_in_s"} for c in sig.checks)


@pytest.mark.parametrize(
    ("relative", "class_name", "message"),
    [
        (
            "pipelines/pixart_alpha/pipeline_pixart_alpha.py",
            "PixArtAlphaPipeline",
            "Invalid sample size",
        ),
        ("pipelines/sana/pipeline_sana.py", "SanaPipeline", "Invalid sample size"),
    ],
)
def test_image_pipeline_resolution_binning(relative: str, class_name: str, message: str):
    sig = _signature(relative, class_name)
    avoid = [c for c in sig.checks if c.avoid]
    assert avoid and avoid[0].avoid == {"use_resolution_binning": False}
    assert avoid[0].params == ("use_resolution_binning",)
    assert avoid[0].message == message
    assert _roles(sig, "resolution")[:2] == ["height", "width"]


def test_pixart_accepts_any_keyword():
    sig = _signature("pipelines/pixart_alpha/pipeline_pixart_alpha.py", "PixArtAlphaPipeline")
    assert sig.var_keyword == "kwargs"
    doc = sig.to_json()
    assert doc["acceptsVarKeyword"] is True
    assert doc["parameters"][-1] == {
        **doc["parameters"][-1],
        "kind": "var_keyword",
        "required": False,
    }


def test_inherited_call():
    """StableDiffusionOnnxPipeline defines no __call__: it inherits OnnxStableDiffusionPipeline's
    (a base class of the same module)."""
    rel = "pipelines/stable_diffusion/pipeline_onnx_stable_diffusion.py"
    sig = _signature(rel, "StableDiffusionOnnxPipeline")
    base = _signature(rel, "OnnxStableDiffusionPipeline")
    assert sig.defined_in == "OnnxStableDiffusionPipeline" and base.defined_in == base.class_name
    assert sig.line == base.line
    assert [p.name for p in sig.parameters] == [p.name for p in base.parameters]
    assert _param(sig, "height").default == 512 and _param(sig, "height").role == "resolution"
    assert sig.to_json()["definedIn"] == "OnnxStableDiffusionPipeline"


# --- a third-party pipeline in an unusual style ------------------------------------------------

_BASE = """
import torch

FPS = 8
SECONDS = 2.5
DEFAULT_SIZE = (256, 448)


class _Base:
    MAX_STEPS = 12

    def __call__(
        self,
        prompt,
        /,
        reference_video,
        *clips,
        duration_s: float = SECONDS,
        num_frames: int = FPS * 4 + 1,
        size=DEFAULT_SIZE,
        steps=MAX_STEPS,
        cfg_scale: "float" = -1.5,
        init_mask: "PIL.Image.Image | None" = None,
        sampler=torch.float16,
        enable_upscaler: bool = True,
        **extra,
    ):
        self._validate(num_frames, enable_upscaler=enable_upscaler)
        return prompt

    def _validate(self, n, enable_upscaler):
        if (n - 1) % 4:
            raise ValueError(f"num_frames must be 4k+1, got {n}")
        if enable_upscaler:
            if self.upscaler is None:
                raise RuntimeError("no upscaler loaded")
"""

_PIPE = """
from .base import _Base, FPS


class MotionProcessor:
    def __call__(self, attn, hidden_states):
        return hidden_states


class MotionGen(_Base):
    def __init__(self, transformer, vae):
        self.transformer = transformer
"""


@pytest.fixture
def third_party(tmp_path: Path) -> Path:
    pkg = tmp_path / "motiongen"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "base.py").write_text(textwrap.dedent(_BASE))
    (pkg / "pipe.py").write_text(textwrap.dedent(_PIPE))
    return pkg / "pipe.py"


def test_third_party_unusual_style(third_party: Path):
    sigs = call_signatures(read_source(third_party))
    assert [s.class_name for s in sigs] == ["MotionProcessor", "MotionGen"]
    assert [s.is_pipeline for s in sigs] == [False, False]
    sig = choose_signature(sigs, "MotionGen")
    assert sig is not None and sig.defined_in == "_Base"
    assert sig.path.endswith("base.py")  # the base class, through the relative import
    kinds = {p.name: p.kind for p in sig.parameters}
    assert kinds == {
        "prompt": "positional_only",
        "reference_video": "positional_or_keyword",
        "clips": "var_positional",
        "duration_s": "keyword_only",
        "num_frames": "keyword_only",
        "size": "keyword_only",
        "steps": "keyword_only",
        "cfg_scale": "keyword_only",
        "init_mask": "keyword_only",
        "sampler": "keyword_only",
        "enable_upscaler": "keyword_only",
        "extra": "var_keyword",
    }
    required = [p.name for p in sig.parameters if p.required]
    assert required == ["prompt", "reference_video"]  # never *clips or **extra
    # defaults from module constants, class constants and arithmetic on them
    assert (
        _param(sig, "duration_s").default == 2.5
        and _param(sig, "duration_s").default_text == "SECONDS"
    )
    assert _param(sig, "num_frames").default == 33
    assert _param(sig, "num_frames").default_text == "FPS * 4 + 1"
    assert _param(sig, "size").default == [256, 448]
    assert _param(sig, "steps").default == 12
    assert _param(sig, "cfg_scale").default == -1.5
    assert _param(sig, "cfg_scale").annotation == "float"  # a string annotation, unquoted
    sampler = _param(sig, "sampler")
    assert not sampler.default_is_literal and sampler.default is None
    assert sampler.default_text == "torch.float16"
    # roles from the words, annotation and default
    roles = {p.name: (p.role, p.input_kind) for p in sig.parameters if p.role}
    assert roles == {
        "reference_video": ("input", "video"),
        "duration_s": ("duration", None),
        "num_frames": ("frames", None),
        "size": ("resolution", None),
        "steps": ("steps", None),
        "cfg_scale": ("guidance", None),
        "init_mask": ("input", "mask"),
    }
    # the checker is bound positionally and by keyword; the switch gets an `avoid`
    by_param = {c.params: c for c in sig.checks}
    assert by_param[("num_frames",)].method == "_validate"
    assert by_param[("num_frames",)].message == "num_frames must be 4k+1, got {n}"
    assert by_param[("enable_upscaler",)].avoid == {"enable_upscaler": False}
    doc = sig.to_json()
    assert doc["acceptsVarKeyword"] is True and doc["varKeyword"] == "extra"
    assert doc["required"] == ["prompt", "reference_video"]
    json.dumps(doc, allow_nan=False)  # every default is plain JSON


def test_processor_is_not_chosen_without_a_preference(third_party: Path):
    text = third_party.read_text().replace(
        "class MotionGen(_Base)", "class MotionGenPipeline(_Base)"
    )
    third_party.write_text(text)
    sigs = ordered_signatures(read_source(third_party))
    assert [s.class_name for s in sigs] == ["MotionGenPipeline", "MotionProcessor"]
    assert sigs[0].is_pipeline and not sigs[1].is_pipeline


@pytest.mark.parametrize(
    ("name", "annotation", "default", "expected"),
    [
        ("num_frames", "int", 49, ("frames", None)),
        ("video_length", "int", 129, ("frames", None)),
        ("height", "int | None", None, ("resolution", None)),
        ("audio_length_in_s", "float | None", None, ("duration", None)),
        ("num_inference_steps", "int", 28, ("steps", None)),
        ("callback_steps", "int", 1, (None, None)),
        ("true_cfg_scale", "float", 4.0, ("guidance", None)),
        ("image", "PipelineImageInput", None, ("input", "image")),
        ("mask_image", "PipelineImageInput | None", None, ("input", "mask")),
        ("video", None, None, ("input", "video")),
        ("prompt_embeds", "torch.Tensor | None", None, (None, None)),
        ("image_embeds", "PipelineImageInput", None, (None, None)),
        ("use_resolution_binning", "bool", True, (None, None)),
        ("max_sequence_length", "int", 512, (None, None)),
        ("num_videos_per_prompt", "int", 1, (None, None)),
    ],
)
def test_roles(name, annotation, default, expected):
    assert guess_role(name, annotation, default) == expected


# --- in the analyze JSON -------------------------------------------------------------------------


def test_analyze_json_carries_the_call_signature():
    result = analyze_path(
        E2E / "models" / "demo_mmdit.py",
        pipeline_path=E2E / "pipelines" / "demo_mmdit_pipeline.py",
        registry=False,
    )
    doc = json.loads(json.dumps(result.to_json(), allow_nan=False))
    sig = doc["pipeline"]["callSignature"]
    assert sig["className"] == "DemoMMDiTPipeline"
    assert sig["required"] == ["prompt"]
    params = {p["name"]: p for p in sig["parameters"]}
    assert params["height"]["role"] == "resolution" and params["height"]["default"] == 1024
    assert params["prompt"]["hasDefault"] is False and params["prompt"]["required"] is True
    assert doc["pipeline"]["otherCallSignatures"] == []
    assert "DemoMMDiTPipeline.__call__" in render_report(result)


def test_analyze_json_prefers_the_model_index_class(tmp_path: Path, third_party: Path):
    index = tmp_path / "model_index.json"
    index.write_text(json.dumps({"_class_name": "MotionProcessor"}))
    result = analyze_path(
        E2E / "models" / "demo_mmdit.py",
        pipeline_path=third_party,
        model_index_path=index,
        registry=False,
    )
    doc = result.to_json()["pipeline"]
    assert doc["callSignature"]["className"] == "MotionProcessor"
    assert [s["className"] for s in doc["otherCallSignatures"]] == ["MotionGen"]


def test_without_a_pipeline_there_is_no_signature():
    result = analyze_path(E2E / "models" / "demo_mmdit.py", registry=False)
    assert result.to_json()["pipeline"] is None


# --- the golden document the extension's unit tests read -----------------------------------------

GOLDEN = Path(__file__).resolve().parent.parent / "extension" / "test" / "fixtures"
GOLDEN_SIGNATURES = GOLDEN / "call-signatures.json"
_GOLDEN_CASES = {
    "sanaVideo": ("pipelines/sana_video/pipeline_sana_video.py", "SanaVideoPipeline"),
    "wanI2V": ("pipelines/wan/pipeline_wan_i2v.py", "WanImageToVideoPipeline"),
    "stableAudio": ("pipelines/stable_audio/pipeline_stable_audio.py", "StableAudioPipeline"),
    "pixart": ("pipelines/pixart_alpha/pipeline_pixart_alpha.py", "PixArtAlphaPipeline"),
}


def _relative(doc: dict, root: Path, prefix: str) -> dict:
    text = json.dumps(doc).replace(json.dumps(str(root))[1:-1], prefix)
    return json.loads(text)


def test_golden_signatures_for_the_extension():
    """`extension/test/fixtures/call-signatures.json` is what the analysis says today (the TS
    tests of prefill, hints and validation run on it). `CDIT_UPDATE_GOLDEN=1` rewrites it."""
    from tests.conftest import diffusers_root

    root = diffusers_root()
    docs = {
        key: _relative(_signature(rel, cls).to_json(), root, "diffusers")
        for key, (rel, cls) in _GOLDEN_CASES.items()
    }
    demo = analyze_path(
        E2E / "models" / "demo_mmdit.py",
        pipeline_path=E2E / "pipelines" / "demo_mmdit_pipeline.py",
        registry=False,
    ).to_json()["pipeline"]
    docs["demoReport"] = {"pipeline": _relative(demo, E2E, "/ws")}
    text = json.dumps(docs, indent=1, sort_keys=True) + "\n"
    if os.environ.get("CDIT_UPDATE_GOLDEN") == "1":
        GOLDEN_SIGNATURES.write_text(text)
    assert GOLDEN_SIGNATURES.exists(), "run with CDIT_UPDATE_GOLDEN=1 to write it"
    assert json.loads(GOLDEN_SIGNATURES.read_text()) == json.loads(text), (
        "the call signatures changed: rerun with CDIT_UPDATE_GOLDEN=1 and review the diff"
    )
