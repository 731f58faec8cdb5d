"""Outputs of any pipeline (images, video, audio, unknown), audio and latent metrics, file inputs
and the ``verify`` flags that pass pipeline arguments.

Known pairs: identical signals give ``inf``; a signal scaled by 0.9 has an error of a tenth of
itself, so SNR = 10 log10(1 / 0.01) = 20 dB exactly.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import types
import wave
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("PIL")

from PIL import Image  # noqa: E402

from cdit_runtime.contract import Thresholds  # noqa: E402
from cdit_runtime.errors import RunFailure  # noqa: E402
from cdit_runtime.images import is_audio, preview, save_diff  # noqa: E402
from cdit_runtime.metrics import compare_audio, compare_latents, snr  # noqa: E402
from cdit_runtime.outputs import (  # noqa: E402
    DEFAULT_SAMPLE_RATE,
    extract,
    sample_rate_of,
    save,
    write_wav,
)

REPO = Path(__file__).resolve().parents[1]


def _tone(seconds: float = 0.5, rate: int = 8000, channels: int = 2) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    waves = [0.8 * np.sin(2 * np.pi * 440 * (c + 1) * t) for c in range(channels)]
    return np.stack(waves)[None].astype(np.float32)  # (1, C, T)


def _pipe_with_rate(rate: int) -> object:
    return types.SimpleNamespace(vae=types.SimpleNamespace(config={"sampling_rate": rate}))


# ----------------------------------------------------------------------------------- extract


class _AudioOut:
    def __init__(self, audios: object) -> None:
        self.audios = audios


def test_audio_output_is_audio_with_the_pipelines_sample_rate() -> None:
    audio = _tone()
    out = extract(_AudioOut(audio), _pipe_with_rate(8000))
    assert out.kind == "audio" and out.note == ""
    assert out.array.dtype == np.float32 and out.array.shape == (1, 2, 4000)
    assert out.sample_rate == 8000


def test_audio_from_diffusers_output_class_and_torch_tensors() -> None:
    torch = pytest.importorskip("torch")
    from diffusers.pipelines.pipeline_utils import AudioPipelineOutput

    tensor = torch.from_numpy(_tone()).to(torch.bfloat16)
    out = extract(AudioPipelineOutput(audios=tensor))
    assert out.kind == "audio" and out.array.dtype == np.float32
    assert out.array.shape == (1, 2, 4000) and out.sample_rate is None
    # `audio` (singular), mono (B, T) and an unbatched (T,) waveform
    mono = extract(types.SimpleNamespace(audio=np.zeros((3, 100), dtype=np.float64)))
    assert mono.kind == "audio" and mono.array.shape == (3, 100)
    single = extract({"audios": np.zeros(50)})
    assert single.kind == "audio" and single.array.shape == (1, 50)


def test_images_and_video_are_unchanged() -> None:
    image = extract(types.SimpleNamespace(images=np.zeros((1, 8, 8, 3), dtype=np.uint8) + 255))
    assert image.kind == "image" and image.array.max() == 1.0
    video = extract(types.SimpleNamespace(frames=np.zeros((1, 4, 8, 8, 3))))
    assert video.kind == "video"
    pil = extract(types.SimpleNamespace(images=[Image.new("RGB", (8, 6))]))
    assert pil.kind == "image" and pil.array.shape == (1, 6, 8, 3)


@pytest.mark.parametrize(
    ("out", "says"),
    [
        (object(), "unknown output type object"),
        (types.SimpleNamespace(text="a caption"), "unknown output type"),
        (types.SimpleNamespace(audios=np.array(["a", "b"])), "`audios` of SimpleNamespace is not"),
        (types.SimpleNamespace(audios=np.zeros((1, 2, 3, 4))), "not a waveform"),
        (types.SimpleNamespace(images=np.zeros(4)), "not an image"),
        (types.SimpleNamespace(images=[[1, 2], [3]]), "not an array"),
        ((), "unknown output type tuple"),
    ],
)
def test_unknown_outputs_fall_back_to_latents_with_a_note(out: object, says: str) -> None:
    result = extract(out)
    assert result.kind == "latents" and result.array is None
    assert says in result.note


def test_sample_rate_sources() -> None:
    ns = types.SimpleNamespace
    assert sample_rate_of(None) is None
    assert sample_rate_of(ns(vae=ns(config=ns(sampling_rate=44100)))) == 44100
    assert sample_rate_of(ns(vocoder=ns(config={"sampling_rate": 16000}))) == 16000
    assert sample_rate_of(ns(audio_vae=ns(config={"sample_rate": 24000}), vae=None)) == 24000
    assert sample_rate_of(ns(feature_extractor=ns(sampling_rate=48000))) == 48000
    assert sample_rate_of(ns(vae=ns(config={"scaling_factor": 0.3}))) is None


# -------------------------------------------------------------------------------------- save


def test_save_audio_writes_array_preview_and_wav(tmp_path: Path) -> None:
    audio = _tone()
    audio[0, 0, :10] = 1.5  # beyond full scale: clipped in the WAV, kept in the array
    files = save(tmp_path, "ulysses-2", extract(_AudioOut(audio), _pipe_with_rate(8000)), None)
    assert files == {
        "array": "arrays/ulysses-2.npy",
        "output": "images/ulysses-2.png",
        "audio": "audio/ulysses-2.wav",
    }
    assert np.array_equal(np.load(tmp_path / files["array"]), audio)
    with wave.open(str(tmp_path / files["audio"]), "rb") as handle:
        assert handle.getnchannels() == 2 and handle.getsampwidth() == 2
        assert handle.getframerate() == 8000 and handle.getnframes() == 4000
        pcm = np.frombuffer(handle.readframes(4000), dtype="<i2").reshape(-1, 2).T
    assert pcm[0, 0] == 32767  # clipped
    assert np.abs(pcm[:, 10:] / 32767.0 - audio[0, :, 10:]).max() < 1.0 / 32767
    png = Image.open(tmp_path / files["output"])
    assert png.size == (512, 2 * 98 + 128) and png.mode == "RGB"


def test_save_mono_audio_without_a_known_rate_and_latents(tmp_path: Path) -> None:
    out = extract(_AudioOut(np.zeros((2, 300), dtype=np.float32)))
    files = save(tmp_path, "baseline", out, np.ones((1, 4, 8)))
    with wave.open(str(tmp_path / files["audio"]), "rb") as handle:
        assert handle.getnchannels() == 1 and handle.getframerate() == DEFAULT_SAMPLE_RATE
        assert handle.getnframes() == 300
    assert files["latents"] == "arrays/baseline.latents.npy"
    only_latents = save(tmp_path, "cache", extract(object()), np.ones(3))
    assert only_latents == {"latents": "arrays/cache.latents.npy"}


def test_audio_preview_and_diff(tmp_path: Path) -> None:
    audio = _tone(channels=1)
    assert is_audio(audio) and not is_audio(np.zeros((8, 8, 3)))
    assert is_audio(np.zeros((2, 100)), "audio") and not is_audio(audio, "image")
    image = preview(audio, "audio")
    assert image.dtype == np.uint8 and image.shape == (98 + 128, 512, 3)
    noisy = audio + np.random.default_rng(0).normal(0, 0.01, audio.shape).astype(np.float32)
    peak = save_diff(audio, noisy, tmp_path / "d.png", "audio")
    assert peak == pytest.approx(float(np.abs(noisy - audio).max()))
    assert Image.open(tmp_path / "d.png").size == (512, 98 + 128)
    assert save_diff(audio, audio, tmp_path / "same.png") == 0.0  # kind inferred from shape


# ----------------------------------------------------------------------------------- metrics


def test_identical_audio_gives_inf_and_no_ssim() -> None:
    audio = _tone()
    result = compare_audio(audio, audio)
    assert result.psnr_db == math.inf and result.snr_db == math.inf
    assert result.ssim is None and result.frames == 1


def test_audio_snr_and_psnr_on_a_known_pair() -> None:
    ref = np.tile(np.array([1.0, -1.0]), (1, 2, 500))  # (1, 2, 1000), range 2
    result = compare_audio(ref, 0.9 * ref)
    # error = 0.1 * ref: SNR = 10 log10(1 / 0.1^2) = 20 dB; PSNR = 10 log10(2^2 / 0.01) dB
    assert result.snr_db == pytest.approx(20.0, abs=1e-6)
    assert result.psnr_db == pytest.approx(10 * math.log10(4 / 0.01), abs=1e-5)
    assert result.psnr_db == pytest.approx(26.0206, abs=1e-4)


def test_audio_snr_at_a_known_noise_level() -> None:
    rng = np.random.default_rng(7)
    ref = _tone(seconds=1.0)  # amplitude 0.8: power 0.32 per sample
    noise = rng.normal(0.0, 0.008, ref.shape)
    result = compare_audio(ref, ref + noise)
    by_hand = 10 * math.log10(float(np.sum(ref.astype(np.float64) ** 2) / np.sum(noise**2)))
    assert result.snr_db == pytest.approx(by_hand, abs=1e-3)
    assert result.snr_db == pytest.approx(10 * math.log10(0.32 / 0.008**2), abs=0.1)  # 36.99 dB
    peak = float(ref.max() - ref.min())
    mse = float(np.mean(noise**2))
    assert result.psnr_db == pytest.approx(10 * math.log10(peak**2 / mse), abs=1e-3)


def test_silent_reference_and_shape_mismatch() -> None:
    silence = np.zeros((1, 2, 100))
    assert snr(silence, silence + 0.1) == -math.inf
    result = compare_audio(silence, silence + 0.1)  # peak falls back to the full scale, 2.0
    assert result.psnr_db == pytest.approx(10 * math.log10(4 / 0.01))
    with pytest.raises(ValueError, match="shapes differ"):
        compare_audio(np.zeros((1, 2, 100)), np.zeros((1, 2, 99)))


def test_latent_psnr_uses_the_reference_range() -> None:
    ref = np.linspace(-2.0, 2.0, 4096).reshape(1, 4, 32, 32)  # range 4
    result = compare_latents(ref, ref + 0.04)
    assert result.psnr_db == pytest.approx(10 * math.log10(16 / 0.0016), abs=1e-6)  # 40 dB
    assert result.max_abs_diff == pytest.approx(0.04)
    same = compare_latents(ref, ref.copy())
    assert same.psnr_db == math.inf and same.max_abs_diff == 0.0


def test_audio_comparison_goes_through_the_verdict() -> None:
    from cdit_runtime.metrics import verdict

    audio = _tone()
    name, reason = verdict("ulysses", compare_audio(audio, audio), Thresholds(), dtype="float32")
    assert name == "pass" and "SSIM" not in reason
    noisy = compare_audio(audio, audio + 0.05)
    assert verdict("ulysses", noisy, Thresholds(), dtype="float32")[0] == "fail"


# ------------------------------------------------------------------------------------ inputs


def _pcm_wav(path: Path, data: np.ndarray, width: int, rate: int = 8000) -> None:
    """``data`` (C, T) integer samples written with the given sample width."""
    if width == 1:
        raw = (data + 128).astype(np.uint8).T.tobytes()
    elif width == 3:
        le = data.T.astype("<i4").reshape(-1, 1).view(np.uint8).reshape(-1, 4)[:, :3]
        raw = le.tobytes()
    else:
        raw = data.T.astype(f"<i{width}").tobytes()
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(data.shape[0])
        handle.setsampwidth(width)
        handle.setframerate(rate)
        handle.writeframes(raw)


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_wav_reader_scales_every_pcm_width(tmp_path: Path, width: int) -> None:
    pytest.importorskip("torch")
    from cdit_runtime.inputs import load_audio

    full = 1 << (8 * width - 1)
    data = np.array([[0, full // 2, -full, full - 1], [1, -1, full // 4, -full // 4]])
    _pcm_wav(tmp_path / "a.wav", data, width)
    waveform, rate = load_audio(tmp_path / "a.wav")
    assert rate == 8000 and tuple(waveform.shape) == (2, 4)
    assert np.allclose(waveform.numpy(), data / full, atol=1e-7)


def test_wav_round_trip_with_write_wav(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from cdit_runtime.inputs import load_inputs

    audio = _tone(seconds=0.1)
    write_wav(tmp_path / "tone.wav", audio[0], 8000)
    loaded = load_inputs({"initial_audio_waveforms": str(tmp_path / "tone.wav")})
    waveform = loaded["initial_audio_waveforms"]
    assert tuple(waveform.shape) == (1, 2, 800) and str(waveform.dtype) == "torch.float32"
    # written as round(x * 32767), read as n / 32768 (the usual PCM convention)
    assert np.abs(waveform.numpy() - audio).max() < 2.0 / 32767


def test_image_video_and_array_inputs(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("diffusers")
    from cdit_runtime.inputs import load_inputs

    Image.new("L", (12, 10), 200).save(tmp_path / "mask.png")
    frames = [Image.new("RGB", (8, 8), (i * 60, 0, 0)) for i in range(3)]
    frames[0].save(tmp_path / "clip.gif", save_all=True, append_images=frames[1:], duration=100)
    np.save(tmp_path / "lat.npy", np.arange(6, dtype=np.float32).reshape(2, 3))
    loaded = load_inputs(
        {
            "image": str(tmp_path / "mask.png"),
            "video": str(tmp_path / "clip.gif"),
            "latents": str(tmp_path / "lat.npy"),
        }
    )
    assert loaded["image"].mode == "RGB" and loaded["image"].size == (12, 10)
    assert isinstance(loaded["video"], list) and len(loaded["video"]) == 3
    assert loaded["video"][2].convert("RGB").getpixel((0, 0))[0] == 120
    assert tuple(loaded["latents"].shape) == (2, 3) and float(loaded["latents"][1, 2]) == 5.0


def test_floating_arrays_take_the_runs_dtype_masks_keep_theirs(tmp_path: Path) -> None:
    """numpy has no bfloat16: prompt embeddings saved as float32 would reach a pipeline that only
    moves them to its device as float32 activations for bfloat16 layers (NucleusMoE-Image:
    `mat1 and mat2 must have the same dtype`)."""
    torch = pytest.importorskip("torch")
    from cdit_runtime.inputs import load_inputs

    np.save(tmp_path / "embeds.npy", np.ones((1, 4, 8), dtype=np.float32))
    np.save(tmp_path / "mask.npy", np.ones((1, 4), dtype=bool))
    np.save(tmp_path / "ids.npy", np.arange(4, dtype=np.int64))
    files = {n: str(tmp_path / f"{n}.npy") for n in ("embeds", "mask", "ids")}
    loaded = load_inputs(files, torch.bfloat16)
    assert loaded["embeds"].dtype == torch.bfloat16
    assert loaded["mask"].dtype == torch.bool and loaded["ids"].dtype == torch.int64
    assert load_inputs(files)["embeds"].dtype == torch.float32  # no run dtype: as stored


def test_bad_inputs_are_one_line_bad_input_errors(tmp_path: Path) -> None:
    from cdit_runtime.inputs import check_inputs, load_inputs

    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "broken.wav").write_bytes(b"RIFF0000WAVEjunk")
    (tmp_path / "broken.png").write_bytes(b"not a png")
    cases = {
        "image": tmp_path / "missing.png",
        "text": tmp_path / "notes.txt",
    }
    for name, path in cases.items():
        with pytest.raises(RunFailure) as info:
            check_inputs({name: str(path)})
        assert info.value.info.code == "BAD_INPUT" and info.value.info.hint
        assert "\n" not in info.value.info.message and name in info.value.info.message
    with pytest.raises(RunFailure, match="not a valid argument name"):
        check_inputs({"bad name": str(tmp_path / "notes.txt")})
    pytest.importorskip("torch")
    pytest.importorskip("diffusers")
    for name in ("broken.wav", "broken.png"):
        with pytest.raises(RunFailure) as info:
            load_inputs({"x": str(tmp_path / name)})
        assert info.value.info.code == "BAD_INPUT" and "\n" not in info.value.info.message
        assert "cannot read" in info.value.info.message or "needs" in info.value.info.message


def test_compressed_audio_needs_a_library_and_says_so_early(tmp_path: Path) -> None:
    from importlib.util import find_spec

    from cdit_runtime.inputs import check_inputs

    if find_spec("soundfile") or find_spec("torchaudio"):
        pytest.skip("an audio library is installed")
    (tmp_path / "a.flac").write_bytes(b"fLaC")
    with pytest.raises(RunFailure, match="needs soundfile or torchaudio"):
        check_inputs({"audio": str(tmp_path / "a.flac")})


# ---------------------------------------------------------------------------------- CLI flags


def _request(*argv: str) -> dict:
    import argparse

    from cdit_runtime.cli import add_verify_arguments, build_request

    parser = argparse.ArgumentParser()
    add_verify_arguments(parser)
    return build_request(parser.parse_args(list(argv)))


def test_call_args_and_inputs_go_into_the_request(tmp_path: Path) -> None:
    (tmp_path / "req.json").write_text(
        json.dumps(
            {
                "model": {"source": "tiny", "family": "wan"},
                "outputDir": str(tmp_path),
                "extraCallKwargs": {"num_frames": 9, "keep": 1},
                "inputs": {"image": "/old.png"},
            }
        )
    )
    data = _request(
        str(tmp_path / "req.json"),
        "--call-arg", "num_frames=5",
        "--call-arg", "use_resolution_binning=false",
        "--call-arg", 'negative_prompt="blurry, low quality"',
        "--call-arg", "sizes=[1, 2]",
        "--call-arg", "attention_kwargs={\"scale\": 0.5}",
        "--input", "image=pics/cat.png",
        "--input", "initial_audio_waveforms=/abs/tone.wav",
    )  # fmt: skip
    assert data["extraCallKwargs"] == {
        "num_frames": 5,
        "keep": 1,
        "use_resolution_binning": False,
        "negative_prompt": "blurry, low quality",
        "sizes": [1, 2],
        "attention_kwargs": {"scale": 0.5},
    }
    assert data["inputs"] == {
        "image": str(Path("pics/cat.png").resolve()),
        "initial_audio_waveforms": "/abs/tone.wav",
    }
    from cdit_runtime.contract import load_request

    request = load_request(data)
    assert request.extra_call_kwargs["num_frames"] == 5 and request.dtype is None


def test_dtype_is_left_to_the_runtime_unless_given() -> None:
    assert "dtype" not in _request("--tiny", "flux", "--device", "cpu")
    assert "dtype" not in _request("--tiny", "wan")
    assert _request("--tiny", "flux", "--dtype", "bfloat16")["dtype"] == "bfloat16"


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdit_runtime", "verify", *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--call-arg", "audio_end_in_s=abc", "'abc' is not JSON"),
        ("--call-arg", "audio_end_in_s", "expected NAME=VALUE"),
        ("--call-arg", "2x=1", "expected NAME=VALUE"),
        ("--input", "image=", "empty path"),
    ],
)
def test_bad_flag_values_are_one_clear_line(flag: str, value: str, says: str) -> None:
    proc = _cli("--tiny", "flux", flag, value, "--print-request")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cdit-integrate verify: bad request:")
    assert says in lines[0] and flag in lines[0]


def test_help_documents_both_flags() -> None:
    proc = _cli("--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "--call-arg NAME=JSON" in text and "--input NAME=PATH" in text
    assert "extraCallKwargs" in text and "load_image" in text and "load_video" in text
    assert "float32 on CPU" in text
