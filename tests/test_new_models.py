"""New-models end-to-end suite, CI subset: zero-edit integrations must keep verifying.

Two of the tiny random-weight pipelines of ``tests/new_models`` (diffusers classes cache-dit has
no adapter for) go through analyze -> plan -> generate (standalone) -> verify (CPU, float32, one
runtime request each), and the phases that pass today with zero edits must keep passing. The
whole suite (every model and phase, the measured table) is ``python -m tests.new_models.suite``;
results and the failures still open are in ``docs/new-models.md``. Extend ``KEEP_PASSING`` as
phases start to pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")
pytest.importorskip("cache_dit")

from tests.new_models.models import CHECKS, MODELS
from tests.new_models.suite import PhaseOutcome, Row, failures, markdown, run_model, verify

# model -> phase kinds that pass with zero edits (measured 2026-12-01, docs/new-models.md)
KEEP_PASSING: dict[str, tuple[str, ...]] = {
    # Ulysses-2 / Ring-2: the audio mask split with the tokens at every block (the blocks
    # multiply it into their tokens) and gathered with the keys inside the CP attention; the
    # long skip gathered at the last block
    "longcat-audio": ("baseline", "cache", "ulysses", "ring"),
    "nucleus-moe": ("baseline", "cache", "ulysses", "ring"),
    # UAA-2 with the joint text/video mask permuted into all-to-all order at every dual-stream
    # block, and the single-stream blocks after the gather running local attention; Ring-2 with
    # the same permutation and each ring step attending under its key shard's mask columns
    "motif-video": ("baseline", "cache", "ulysses", "ring"),
    # a model cache-dit already integrates, as a check of routed SDPA on a real pipeline:
    # `AttnProcessor2_0` calls SDPA itself; the padded prompt's mask is split with the text at
    # every block and its columns follow the keys
    "pixart-sigma": ("baseline", "cache", "ulysses", "ring"),
    # CP over the frame axis of the latent: the temporal blocks' attention routed, the spatial
    # blocks' local, `temp_pos_embed` sliced per rank, the output gathered on the frame axis
    # (its cache phase fails on quality with random weights: docs/new-models.md)
    "latte": ("baseline", "ulysses", "ring"),
    # caching with true CFG decided for the suite's call (`true_cfg_scale` 4, negative
    # embeddings), the per-layer KV cache read in each block's step, and the step after the
    # prefill (its stream shorter) computed by the forced calibration
    "qwenimage21": ("baseline", "cache"),
}
ALL = {**MODELS, **CHECKS}


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Row]:
    base = tmp_path_factory.mktemp("new-models")
    return {name: run_model(ALL[name], base, kinds) for name, kinds in KEEP_PASSING.items()}


@pytest.mark.parametrize("name", list(KEEP_PASSING))
def test_generation_refuses_nothing(rows: dict[str, Row], name: str) -> None:
    row = rows[name]
    assert row.integration, row.refused
    assert row.block_lists, row


@pytest.mark.parametrize("name", list(KEEP_PASSING))
def test_phases_that_pass_today_keep_passing(rows: dict[str, Row], name: str) -> None:
    row = rows[name]
    assert len(row.phases) == len(KEEP_PASSING[name]), row.phases
    broken = {phase: outcome.cell() for phase, outcome in row.phases.items() if not outcome.passed}
    assert not broken, broken
    # a cache pass rests on its no-cache control and at least one cached step
    if "cache" in row.phases:
        assert row.phases["cache"].detail.split()[0] not in ("0", "None"), row.phases["cache"]


def test_table_and_failures_render() -> None:
    row = Row("m", "image", "MTransformer", block_lists="blocks (Pattern_0)", cp_approach="root")
    row.phases = {
        "baseline": PhaseOutcome("ok", "pass", "baseline"),
        "cache": PhaseOutcome("ok", "pass", "3 cached"),
        "uaa-2": PhaseOutcome("failed", None, "PHASE_FAILED RuntimeError: a | b"),
        "tp-2": PhaseOutcome("refused", None, "PHASE_FAILED tensor parallelism is not part"),
    }
    table = markdown([row])
    assert "pass (3 cached)" in table and "failed: PHASE_FAILED RuntimeError: a \\| b" in table
    assert "not run" in table  # ring-2
    assert [f["phase"] for f in failures([row])] == ["uaa-2", "tp-2"]


def test_every_model_names_an_installed_class() -> None:
    import importlib

    for model in MODELS.values():
        module = importlib.import_module(model.transformer_path)
        assert hasattr(module, model.transformer_class), model.name
        assert Path(importlib.import_module(model.pipeline_path).__file__ or "").is_file()


@pytest.mark.parametrize(
    ("old", "new", "kind", "phase"),
    [
        ("_reorder_masks(model, world)", "pass", "ulysses", "uaa-2"),
        (
            "source = (rank - next(steps)) % world",
            "source = rank + 0 * next(steps)",
            "ring",
            "ring-2",
        ),
    ],
    ids=["uaa-without-the-mask-reorder", "ring-steps-with-their-own-shards-mask"],
)
def test_motif_cp_fails_without_its_mask_steps(
    rows: dict[str, Row], tmp_path: Path, old: str, new: str, kind: str, phase: str
) -> None:
    """The controls for the mask steps: the same generated module with the permutation skipped
    (UAA-2), or with every ring step attending under this rank's own key columns as cache-dit's
    ring does (Ring-2), runs and fails the 80 dB bar (the prompt is padded, so the mask matters)."""
    row = rows["motif-video"]
    assert row.integration and row.phases[phase].passed, row.phases
    code = Path(row.integration).read_text()
    assert code.count(old) == 1
    mutant = tmp_path / "motif_mutant.py"
    mutant.write_text(code.replace(old, new))
    out = tmp_path / "mutant"
    out.mkdir()
    (out / "model").symlink_to(Path(row.integration).parent / "model")
    control = Row("motif-video", "video", "MotifVideoTransformer3DModel", uaa=True)
    verify(MODELS["motif-video"], mutant, out, control, ("baseline", kind))
    outcome = control.phases[phase]
    assert outcome.status == "ok" and outcome.verdict == "fail", outcome


@pytest.mark.parametrize(
    ("old", "new", "kind", "phase"),
    [
        # the text mask's columns joined in the wrong rank order
        ("zip(parts, counts)", "zip(parts[::-1], counts[::-1])", "ulysses", "uaa-2"),
        ("zip(parts, counts)", "zip(parts[::-1], counts[::-1])", "ring", "ring-2"),
        # the text mask left whole beside this rank's text: the processor pads it wrongly
        ("            _split_stream_masks(model)", "            pass", "ulysses", "uaa-2"),
    ],
    ids=["uaa-mask-columns-reversed", "ring-mask-columns-reversed", "uaa-text-mask-not-split"],
)
def test_pixart_cp_fails_without_its_mask_steps(
    rows: dict[str, Row], tmp_path: Path, old: str, new: str, kind: str, phase: str
) -> None:
    """Controls for PixArt-Sigma's CP: the prompt is padded to 16 tokens, so which key each mask
    column stands for matters; each mutant runs and fails the 80 dB bar, or stops."""
    row = rows["pixart-sigma"]
    assert row.integration and row.phases[phase].passed, row.phases
    code = Path(row.integration).read_text()
    assert code.count(old) == 1, old
    mutant = tmp_path / "pixart_mutant.py"
    mutant.write_text(code.replace(old, new))
    out = tmp_path / "mutant"
    out.mkdir()
    (out / "model").symlink_to(Path(row.integration).parent / "model")
    control = Row("pixart-sigma", "image", "PixArtTransformer2DModel", uaa=True)
    verify(CHECKS["pixart-sigma"], mutant, out, control, ("baseline", kind))
    outcome = control.phases[phase]
    assert outcome.status != "ok" or outcome.verdict == "fail", outcome
