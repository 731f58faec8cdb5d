"""Registry facts read statically from cache-dit: the installed 1.5.x and a synthetic fake tree."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from lsp_server.analysis import registry_facts as rf
from lsp_server.analysis.model import RegistryFacts
from lsp_server.analysis.registry_facts import (
    Registries,
    propose_register_name,
    read_registries,
    registry_facts,
)

REPO = Path(__file__).resolve().parents[1]

_installed = importlib.util.find_spec("cache_dit") is not None
needs_cache_dit = pytest.mark.skipif(not _installed, reason="cache-dit is not installed")


# ----------------------------------------------------------------------------------------------
# The installed cache-dit.


@pytest.fixture(scope="module")
def installed() -> Registries:
    regs = read_registries()
    assert regs.installed, regs.problems
    return regs


@needs_cache_dit
def test_version_comes_from_dist_info(installed: Registries) -> None:
    assert installed.cache_dit_version == importlib.metadata.version("cache-dit")


@needs_cache_dit
def test_adapter_list_is_in_registration_order(installed: Registries) -> None:
    adapters = installed.adapters
    assert adapters[0] == "Flux"
    assert {"Flux", "Wan", "QwenImage", "LTX", "HunyuanDiT", "Krea2"} <= set(adapters)
    # A broader name registered earlier wins over its variants; "Flux" precedes every Flux* name.
    flux = adapters.index("Flux")
    assert all(adapters.index(n) > flux for n in adapters if n.startswith("Flux") and n != "Flux")
    # File order, not sorted: BriaFibo is registered before Bria, HunyuanDiT before HunyuanDiTPAG.
    assert adapters.index("BriaFibo") < adapters.index("Bria")
    assert adapters.index("HunyuanDiT") < adapters.index("HunyuanDiTPAG")
    assert len(set(adapters)) == len(adapters)
    flux_reg = installed.entries("adapter")[flux]
    assert flux_reg.path.endswith("caching/block_adapters/adapters.py")
    assert flux_reg.target == "flux_adapter"


@needs_cache_dit
def test_existing_flux_adapter_and_planners() -> None:
    facts = registry_facts("FluxTransformer2DModel", "FluxPipeline")
    assert facts.existing_adapter == "Flux"
    assert facts.adapter_matched_on == ("FluxTransformer2DModel", "FluxPipeline")
    assert facts.cp_planner is not None and "FluxTransformer2DModel".startswith(facts.cp_planner)
    assert facts.tp_planner is not None and "FluxTransformer2DModel".startswith(facts.tp_planner)
    assert facts.cp_planner.startswith("Flux") and facts.tp_planner.startswith("Flux")
    assert facts.to_json()["existingAdapter"] == "Flux"


@needs_cache_dit
def test_planner_registries(installed: Registries) -> None:
    assert "FluxTransformer2DModel" in installed.cp_planners
    assert any(n.startswith("Flux") for n in installed.tp_planners)
    assert "T5EncoderModel" in installed.text_encoder_planners
    assert "AutoencoderKL" in installed.vae_planners
    # The VAE registry matches exact class names, the others by prefix.
    assert installed.match_mode("vae_dp") == "exact"
    assert installed.match_mode("cp") == "prefix"
    assert installed.first_match("vae_dp", "AutoencoderKLWan") is not None
    assert installed.first_match("vae_dp", "AutoencoderKLWanVariant") is None
    # Nunchaku planners are activated only under `if nunchaku is importable`.
    nunchaku = [r for r in installed.entries("cp") if r.name.startswith("Nunchaku")]
    assert nunchaku and all(r.status == "conditional" for r in nunchaku)


@needs_cache_dit
def test_proposed_name_shadowed_by_registered_prefix() -> None:
    facts = registry_facts(
        "FluxKreaTransformer2DModel", "FluxKreaPipeline", proposed_name="FluxKrea"
    )
    assert facts.proposed_name == "FluxKrea"
    assert "Flux" in facts.shadowing_names
    note = next(n for n in facts.notes if "'Flux'" in n and "shadow" in n)
    assert "pick a name that no registered name prefixes" in note
    assert "inside the existing 'Flux' factory" in note


@needs_cache_dit
def test_proposed_name_would_capture_registered_name() -> None:
    facts = registry_facts("WaTransformer3DModel", "WaPipeline", proposed_name="Wa")
    assert "Wan" in facts.shadowing_names
    assert facts.existing_adapter is None
    note = next(n for n in facts.notes if "'Wan'" in n)
    assert "capture" in note and "not a prefix of any registered name" in note


@needs_cache_dit
def test_novel_model_has_no_adapter_and_gets_a_proposal() -> None:
    facts = registry_facts("AcmeVidTransformer3DModel", "AcmeVidPipeline")
    assert facts.existing_adapter is None
    assert facts.adapter_matched_on == ()
    assert facts.proposed_name == "AcmeVid"
    assert facts.shadowing_names == ()
    assert facts.cp_planner is None and facts.tp_planner is None
    assert facts.cache_dit_version is not None


@needs_cache_dit
def test_reading_does_not_import_cache_dit_torch_or_diffusers() -> None:
    code = textwrap.dedent(
        """
        import sys
        from lsp_server.analysis.registry_facts import registry_facts
        facts = registry_facts("FluxTransformer2DModel", "FluxPipeline")
        assert facts.existing_adapter == "Flux", facts
        roots = {"cache_dit", "torch", "diffusers"}
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in roots)
        assert not heavy, heavy
        """
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)


@needs_cache_dit
def test_read_timing_and_cache() -> None:
    rf.clear_cache()
    start = time.perf_counter()
    first = read_registries()
    cold = time.perf_counter() - start
    start = time.perf_counter()
    second = read_registries()
    warm = time.perf_counter() - start
    assert second is first
    print(f"\nread_registries: cold {cold * 1000:.1f} ms, cached {warm * 1000:.2f} ms")


# ----------------------------------------------------------------------------------------------
# Proposals (string structure only).


@pytest.mark.parametrize(
    ("transformer", "pipeline", "expected"),
    [
        ("Krea2Transformer2DModel", "Krea2Pipeline", "Krea2"),
        ("AcmeVidTransformer3DModel", "AcmeVidPipeline", "AcmeVid"),
        ("WanTransformer3DModel", "WanImageToVideoPipeline", "Wan"),
        ("HunyuanDiT2DModel", "HunyuanDiTPAGPipeline", "HunyuanDiT"),
        ("SD3Transformer2DModel", "StableDiffusion3Pipeline", "StableDiffusion3"),
        ("AcmeVidTransformer3DModel", None, "AcmeVid"),
        ("LTXVideoTransformer3DModel", None, "LTXVideo"),
        ("MyDiT", None, "My"),
        ("DemoMMDiTTransformer2DModel", None, "DemoMMDiT"),
        ("Transformer2DModel", None, "Transformer"),
    ],
)
def test_propose_register_name(transformer: str, pipeline: str | None, expected: str) -> None:
    assert propose_register_name(transformer, pipeline) == expected


# ----------------------------------------------------------------------------------------------
# A synthetic cache-dit tree: proves the reader parses decorators and activations.


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())


@pytest.fixture()
def fake_tree(tmp_path: Path) -> Path:
    root = tmp_path / "cache_dit"
    _write(root, "__init__.py", "")
    _write(
        tmp_path,
        "cache_dit-9.8.7.dist-info/METADATA",
        "Metadata-Version: 2.4\nName: cache_dit\nVersion: 9.8.7\n\nLong description\n",
    )
    _write(root, "caching/__init__.py", "from .block_adapters import BlockAdapterRegister\n")
    _write(
        root,
        "caching/block_adapters/adapters.py",
        """
        from .block_registers import BlockAdapterRegister

        @BlockAdapterRegister.register("Zeta")
        def zeta_adapter(pipe, **kwargs):
            return None

        @BlockAdapterRegister.register("Alpha")
        def alpha_adapter(pipe, **kwargs):
            return None

        @BlockAdapterRegister.register("Hidden", supported=False)
        def hidden_adapter(pipe, **kwargs):
            return None

        @BlockAdapterRegister.register("AlsoHidden", False)
        def also_hidden_adapter(pipe, **kwargs):
            return None

        @BlockAdapterRegister.register(name="AlphaPro")
        def alpha_pro_adapter(pipe, **kwargs):
            return None
        """,
    )
    _write(
        root,
        "distributed/transformers/register.py",
        """
        class ContextParallelismPlannerRegister:
            _r = {}

            @classmethod
            def get_planner(cls, name):
                for key in cls._r:
                    if name.startswith(key):
                        return cls._r[key]
        """,
    )
    _write(
        root,
        "distributed/transformers/planners.py",
        """
        def _safe_import(module_name, class_name, fallback=None):
            import importlib
            return getattr(importlib.import_module(module_name, package=__package__), class_name)

        def _activate_cp_planners():
            B = _safe_import(".beta", "BetaCP")
            A = _safe_import(".alpha", "AlphaCP")
            if _optional_available():
                O = _safe_import(".optional", "OptionalCP")

        def _activate_tp_planners():
            A = _safe_import(".alpha", "AlphaTP")
            B = _safe_import(".beta", "BetaTP")
        """,
    )
    _write(
        root,
        "distributed/transformers/alpha.py",
        """
        from .register import ContextParallelismPlannerRegister, TensorParallelismPlannerRegister

        @ContextParallelismPlannerRegister.register("AlphaTransformer")
        class AlphaCP:
            pass

        @TensorParallelismPlannerRegister.register("Second")
        @TensorParallelismPlannerRegister.register("First")
        class AlphaTP:
            pass
        """,
    )
    _write(
        root,
        "distributed/transformers/beta.py",
        """
        from .register import ContextParallelismPlannerRegister as _unused  # noqa
        from .register import ContextParallelismPlannerRegister, TensorParallelismPlannerRegister

        @ContextParallelismPlannerRegister.register("BetaTransformer")
        class BetaCP:
            pass

        @TensorParallelismPlannerRegister.register("Beta")
        class BetaTP:
            pass
        """,
    )
    _write(
        root,
        "distributed/transformers/optional.py",
        """
        @ContextParallelismPlannerRegister.register("OptionalTransformer")
        class OptionalCP:
            pass
        """,
    )
    _write(
        root,
        "distributed/transformers/orphan.py",
        """
        @ContextParallelismPlannerRegister.register("AlphaTransformerOrphan")
        class OrphanCP:
            pass
        """,
    )
    _write(
        root,
        "distributed/autoencoders/register.py",
        """
        class AutoEncoderDataParallelismPlannerRegister:
            _r = {}

            @classmethod
            def get_planner(cls, name):
                if name in cls._r:
                    return cls._r[name]
        """,
    )
    _write(
        root,
        "distributed/autoencoders/kl.py",
        """
        @AutoEncoderDataParallelismPlannerRegister.register("AutoencoderKL")
        class KL:
            pass
        """,
    )
    return root


def test_fake_tree_adapters_parsed_from_decorators(fake_tree: Path) -> None:
    regs = read_registries(fake_tree)
    assert regs.cache_dit_version == "9.8.7"
    # Source order (not sorted), `supported=False` (keyword or positional) skipped.
    assert regs.adapters == ("Zeta", "Alpha", "AlphaPro")
    alpha = regs.first_match("adapter", "AlphaProPipeline")
    assert alpha is not None and alpha.name == "Alpha"  # first registered prefix wins
    assert alpha.path == "cache_dit/caching/block_adapters/adapters.py"
    assert alpha.line == 7 and alpha.target == "alpha_adapter"


def test_fake_tree_planner_order_follows_activation(fake_tree: Path) -> None:
    regs = read_registries(fake_tree)
    # CP: the order of `_activate_cp_planners`, the `if`-guarded one conditional, and a decorated
    # planner that no activation imports is reported as inactive and never matched.
    assert regs.cp_planners == ("BetaTransformer", "AlphaTransformer", "OptionalTransformer")
    status = {r.name: r.status for r in regs.entries("cp", include_inactive=True)}
    assert status == {
        "BetaTransformer": "active",
        "AlphaTransformer": "active",
        "OptionalTransformer": "conditional",
        "AlphaTransformerOrphan": "inactive",
    }
    orphan_match = regs.first_match("cp", "AlphaTransformerOrphanModel")
    assert orphan_match is not None and orphan_match.name == "AlphaTransformer"
    # TP: the order of `_activate_tp_planners`; stacked decorators register bottom-up.
    assert regs.tp_planners == ("First", "Second", "Beta")
    # Exact-name lookup read from the register class (`name in registry`).
    assert regs.vae_planners == ("AutoencoderKL",)
    assert regs.match_mode("vae_dp") == "exact"
    assert regs.first_match("vae_dp", "AutoencoderKLWan") is None


def test_fake_tree_facts(fake_tree: Path) -> None:
    regs = read_registries(fake_tree)
    facts = registry_facts("AlphaProTransformer2DModel", "AlphaProPipeline", registries=regs)
    assert facts.cache_dit_version == "9.8.7"
    assert facts.existing_adapter == "Alpha"
    assert facts.proposed_name == "AlphaPro"
    assert facts.shadowing_names == ("Alpha", "AlphaPro")
    assert facts.cp_planner is None and facts.tp_planner is None

    facts = registry_facts("AlphaTransformer2DModel", registries=regs, proposed_name="Al")
    assert facts.shadowing_names == ("Alpha", "AlphaPro")  # "Al" would capture both
    assert facts.cp_planner == "AlphaTransformer"
    assert facts.tp_planner is None


def test_fake_tree_cache_is_invalidated_by_edits(fake_tree: Path) -> None:
    first = read_registries(fake_tree)
    assert read_registries(fake_tree) is first
    adapters = fake_tree / "caching/block_adapters/adapters.py"
    adapters.write_text(
        adapters.read_text()
        + '\n@BlockAdapterRegister.register("Omega")\ndef omega_adapter(pipe, **kw):\n    pass\n'
    )
    stat = adapters.stat()
    os.utime(adapters, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10_000_000))
    second = read_registries(fake_tree)
    assert second is not first
    assert second.adapters == ("Zeta", "Alpha", "AlphaPro", "Omega")


def test_unparsable_file_is_reported_not_raised(fake_tree: Path) -> None:
    _write(
        fake_tree,
        "distributed/transformers/broken.py",
        "@ContextParallelismPlannerRegister.register(\n",
    )
    regs = read_registries(fake_tree)
    assert regs.cp_planners == ("BetaTransformer", "AlphaTransformer", "OptionalTransformer")
    assert any("broken.py" in p for p in regs.problems)


# ----------------------------------------------------------------------------------------------
# Not installed.


def test_not_installed_returns_facts_with_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = read_registries(tmp_path / "no_such_dir")
    assert not missing.installed
    facts = registry_facts("AcmeVidTransformer3DModel", "AcmeVidPipeline", registries=missing)
    assert facts == RegistryFacts(cache_dit_version=None, notes=facts.notes)
    assert facts.notes and facts.notes[0].startswith("cache-dit is not installed")

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, package=None: None)
    assert not read_registries().installed
    facts = registry_facts("FluxTransformer2DModel", "FluxPipeline")
    assert facts.cache_dit_version is None
    assert facts.notes[0].startswith("cache-dit is not installed")
