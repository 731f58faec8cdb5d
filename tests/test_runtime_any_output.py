"""Audio and video pipelines verified end to end from the CLI, with pipeline arguments and inputs.

Each run is a real ``python -m cdit_runtime verify`` on a tiny random-weight pipeline of real
diffusers classes saved with ``save_pretrained``: StableAudioPipeline (built by
``tests/runtime_fixtures/build_tiny_audio.py``, integrated by ``stable_audio_standalone.py``) and
WanPipeline (the ``wan`` tiny family, saved and loaded as a local model, cache-dit's registries).
Nothing but CLI flags: ``--call-arg`` for the pipeline-specific arguments (``audio_end_in_s``,
``num_frames``, ...) and ``--input`` for a WAV file the pipeline starts from.
"""

from __future__ import annotations

import math
import sys
import wave
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")
pytest.importorskip("cache_dit")

from runtime_cli import Run, verify
from runtime_cli import assert_documents_valid as _assert_documents_valid
from runtime_cli import db as _db

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "runtime_fixtures"
RUN_TIMEOUT_S = 300
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _verify(out: Path, *args: str) -> Run:
    return verify(out, *args, timeout=RUN_TIMEOUT_S)


# ------------------------------------------------------------------------------------- audio


@pytest.fixture(scope="module")
def audio_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.runtime_fixtures.build_tiny_audio import build

    return build(tmp_path_factory.mktemp("audio") / "model")


@pytest.fixture(scope="module")
def tone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stereo 0.5 s tone at the tiny model's 64 Hz, written as 16-bit PCM."""
    import numpy as np

    from cdit_runtime.outputs import write_wav
    from tests.runtime_fixtures.build_tiny_audio import SAMPLING_RATE

    t = np.arange(SAMPLING_RATE // 2) / SAMPLING_RATE
    path = tmp_path_factory.mktemp("inputs") / "tone.wav"
    waves = np.stack([0.5 * np.sin(2 * np.pi * 5 * t), 0.5 * np.cos(2 * np.pi * 3 * t)])
    write_wav(path, waves, SAMPLING_RATE)
    return path


AUDIO_ARGS = (
    "--integration", str(FIXTURES / "stable_audio_standalone.py"),
    "--steps", "4",
    "--call-arg", "audio_end_in_s=1.5",
)  # fmt: skip


@pytest.fixture(scope="module")
def audio(audio_model: Path, tone: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _verify(
        tmp_path_factory.mktemp("audio-run"),
        "--model", str(audio_model), *AUDIO_ARGS,
        "--phases", "baseline,cache,ulysses", "--rdt", "2", "--ws", "1",
        "--input", f"initial_audio_waveforms={tone}",
        "--call-arg", "initial_audio_sampling_rate=64",
    )  # fmt: skip


def test_audio_pipeline_verifies_end_to_end(audio: Run) -> None:
    assert audio.code == 0, audio.stderr
    _assert_documents_valid(audio)
    assert audio.result["status"] == "completed"
    assert audio.result["model"]["pipelineClass"] == "StableAudioPipeline"
    assert audio.result["dtype"] == "float32"  # no --dtype on CPU
    for name in ("baseline", "cache", "ulysses-2"):
        phase = audio.phase(name)
        assert phase["status"] == "ok", phase["error"]
        assert phase["outputKind"] == "audio"
    ulysses = audio.phase("ulysses-2")
    assert ulysses["ssim"] is None  # no SSIM for waveforms
    assert _db(ulysses["psnrDb"]) >= 60.0 and _db(ulysses["snrDb"]) >= 60.0
    assert _db(ulysses["latentPsnrDb"]) >= 60.0
    assert ulysses["verdict"] == "pass", ulysses["verdictReason"]
    cache = audio.phase("cache")
    assert cache["snrDb"] is not None and cache["psnrDb"] is not None
    assert cache["cachedSteps"]  # steps were served from the cache: the output moved
    assert _db(cache["snrDb"]) < math.inf


def test_audio_files_are_wav_and_previews(audio: Run) -> None:
    from PIL import Image

    for name in ("baseline", "ulysses-2"):
        images = audio.phase(name)["images"]
        with wave.open(str(audio.out / images["audio"]), "rb") as handle:
            # 1.5 s at the VAE's 64 Hz, stereo, 16-bit
            assert handle.getframerate() == 64 and handle.getnchannels() == 2
            assert handle.getnframes() == 96 and handle.getsampwidth() == 2
        assert Image.open(audio.out / images["output"]).size[0] == 512
    assert (audio.out / audio.phase("ulysses-2")["images"]["diff"]).is_file()


def test_input_file_reaches_the_pipeline(audio_model: Path, tone: Path, tmp_path: Path) -> None:
    """Without its sample rate StableAudio refuses the waveform: proof the input was passed."""
    run = _verify(
        tmp_path, "--model", str(audio_model), *AUDIO_ARGS, "--phases", "baseline",
        "--input", f"initial_audio_waveforms={tone}",
    )  # fmt: skip
    baseline = run.phase("baseline")
    assert baseline["status"] == "failed"
    assert "initial_audio_sampling_rate" in baseline["error"]["message"]


def test_missing_input_is_refused_before_launching(audio_model: Path, tmp_path: Path) -> None:
    run = _verify(
        tmp_path, "--model", str(audio_model), *AUDIO_ARGS, "--phases", "baseline",
        "--input", f"initial_audio_waveforms={tmp_path / 'missing.wav'}",
    )  # fmt: skip
    assert run.code == 1
    assert run.result["error"]["code"] == "BAD_INPUT" and run.result["error"]["hint"]
    assert "missing.wav" in run.result["error"]["message"]
    assert run.result["launches"] == []


def test_unreadable_input_fails_in_the_worker_as_bad_input(
    audio_model: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF\x00\x00\x00\x00WAVEnot really")
    run = _verify(
        tmp_path / "out", "--model", str(audio_model), *AUDIO_ARGS, "--phases", "baseline",
        "--input", f"initial_audio_waveforms={broken}",
    )  # fmt: skip
    assert run.code == 1
    error = run.phase("baseline")["error"]
    assert error["code"] == "BAD_INPUT" and "broken.wav" in error["message"]


def test_dispatch_processor_reproduces_the_original_attention(audio_model: Path) -> None:
    """The fixture's attention processor is the same math as diffusers' (single process)."""
    import torch
    from diffusers import StableAudioPipeline

    from tests.runtime_fixtures.stable_audio_standalone import _use_dispatch_processors

    pipe = StableAudioPipeline.from_pretrained(str(audio_model), torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)

    def run() -> Any:
        generator = torch.Generator().manual_seed(0)
        return pipe("a drum", num_inference_steps=3, audio_end_in_s=1.0, generator=generator)

    reference = run().audios
    _use_dispatch_processors(pipe.transformer)
    assert type(pipe.transformer.transformer_blocks[0].attn2.processor).__name__ == (
        "DispatchStableAudioAttnProcessor"
    )
    assert torch.allclose(run().audios, reference, atol=1e-6, rtol=0)


# ------------------------------------------------------------------------------------- video


def test_video_pipeline_verifies_end_to_end(tmp_path: Path) -> None:
    from cdit_runtime.tiny_pipelines import build_tiny

    model = build_tiny("wan", tmp_path / "wan")
    run = _verify(
        tmp_path / "run",
        "--model", str(model), "--checkout", "--phases", "baseline,ulysses",
        "--height", "32", "--width", "32", "--steps", "4",
        "--call-arg", "num_frames=5", "--call-arg", "max_sequence_length=16",
    )  # fmt: skip
    assert run.code == 0, run.stderr
    _assert_documents_valid(run)
    assert run.result["model"]["pipelineClass"] == "WanPipeline"
    baseline = run.phase("baseline")
    assert baseline["outputKind"] == "video"
    ulysses = run.phase("ulysses-2")
    assert ulysses["outputKind"] == "video"
    assert ulysses["minFramePsnrDb"] is not None and ulysses["minFrameSsim"] is not None
    assert _db(ulysses["psnrDb"]) >= 60.0 and ulysses["snrDb"] is None
    assert ulysses["verdict"] == "pass", ulysses["verdictReason"]
    import numpy as np

    frames = np.load(run.out / baseline["images"]["array"])
    assert frames.shape[:2] == (1, 5)  # --call-arg num_frames=5 reached the pipeline
