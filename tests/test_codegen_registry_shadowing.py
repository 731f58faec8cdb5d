"""Registry shadowing: generated modules use their own adapter and CFG (issue 12, class 1).

cache-dit takes a False `BlockAdapter.has_separate_cfg` as "unknown": with
`cache_config.enable_separate_cfg=None` it asks its registry by the *pipeline* class name (running
the registered factory, which may assert on the transformer class) and forces separate CFG for
some name prefixes. Two models whose names start with a registered name:

* the invented WanLite (`tests/fixtures/models/wan_lite_video.py` + its batched-CFG pipeline):
  cache-dit's `Wan` adapter says has_separate_cfg=True and `Wan` is a forcing prefix;
* diffusers' SanaVideoTransformer3DModel / SanaVideoPipeline: cache-dit's `Sana` factory asserts
  the transformer is a SanaTransformer2DModel.

Each test first shows the failure on cache-dit's own path (a plain BlockAdapter), then that the
generated `enable()` keeps the plan's `has_separate_cfg` (False, and True in a plan that says
so), leaves the caller's config alone and caches on a tiny CPU model. The analysis reports the
shadowing as warnings with advice per target.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from module_loading import load_module

from lsp_server.analysis import analyze_path
from lsp_server.analysis.registry_facts import registry_facts, shadowing_warnings
from lsp_server.codegen import build_plan, generate, parse_plan, write

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
cache_dit = pytest.importorskip("cache_dit")

TESTS = Path(__file__).resolve().parent
WAN_LITE = TESTS / "fixtures" / "models" / "wan_lite_video.py"
WAN_LITE_PIPELINE = TESTS / "fixtures" / "pipelines" / "wan_lite_pipeline.py"
SANA_VIDEO = "diffusers.models.transformers.transformer_sana_video"
SANA_VIDEO_PIPELINE = "diffusers.pipelines.sana_video.pipeline_sana_video"
STEPS = 6


def _generate_modules(
    tmp: Path, name: str, transformer: str, cls: str | None, pipeline: str, pipeline_class: str
) -> dict[bool, ModuleType]:
    """Standalone modules for the plan as analyzed and for it with has_separate_cfg flipped."""
    analysis = analyze_path(transformer, cls, pipeline)
    answers = {
        "target": {"kind": "standalone", "path": str(tmp / f"cdit_{name}.py")},
        "model": {"pipelineClass": pipeline_class},
    }
    data = build_plan(analysis.to_json(), answers)
    out: dict[bool, ModuleType] = {}
    for separate in (False, True):
        doc = copy.deepcopy(data)
        doc["cache"]["hasSeparateCfg"] = separate
        doc["target"]["path"] = str(tmp / f"cdit_{name}_{separate}.py".lower())
        plan, errors = parse_plan(doc)
        assert plan is not None, errors
        result = generate(plan, manifest_path=tmp / ".cdit" / "generated.json")
        assert result.ok, result.to_json()
        write(result)
        out[separate] = load_module(f"cdit_{name}_{separate}", Path(doc["target"]["path"]))
    return out


def _context_cfg(transformer: Any) -> bool:
    return transformer._context_kwargs["cache_config"].enable_separate_cfg


# ----------------------------------------------------------------------------- the analysis


def test_the_analysis_reports_shadowing_as_warnings() -> None:
    result = analyze_path(WAN_LITE, None, WAN_LITE_PIPELINE).to_json()["transformers"][0]
    assert result["separateCfg"]["value"] is False
    warnings = [d for d in result["diagnostics"] if d["code"] == "CDIT202"]
    assert [d["severity"] for d in warnings] == ["warning", "warning"]
    shadow, forcing = (d["message"] for d in warnings)
    assert (
        "registers BlockAdapter 'Wan'" in shadow and "does not handle WanLiteTransformer" in shadow
    )
    assert "(True there)" in shadow
    assert "Standalone target: call the generated `enable()`" in shadow
    assert "cache-dit checkout target: any new name starting with 'Wan' is shadowed" in shadow
    assert "turns separate CFG on for every pipeline whose class starts with 'Wan'" in forcing
    assert result["registry"]["warnings"] == [shadow, forcing]


def test_registry_warnings_name_only_real_shadowing() -> None:
    sana = registry_facts("SanaVideoTransformer3DModel", "SanaVideoPipeline").warnings
    assert len(sana) == 1 and "'Sana'" in sana[0] and "may assert" in sana[0]
    # adapters that handle the class, and a novel name, are not warnings
    assert registry_facts("FluxTransformer2DModel", "FluxPipeline").warnings == ()
    assert registry_facts("SanaTransformer2DModel", "SanaPipeline").warnings == ()
    assert registry_facts("AcmeVidTransformer3DModel", "AcmeVidPipeline").warnings == ()
    # a name-forced separate CFG is harmless when the pipeline does make two calls per step
    wan = shadowing_warnings("WanTransformer3DModel", "WanPipeline", separate_cfg=True)
    assert wan == ()
    assert len(shadowing_warnings("WanTransformer3DModel", "WanPipeline", separate_cfg=False)) == 1
    # advice for one target only when the target is known
    (standalone,) = shadowing_warnings(
        "SanaVideoTransformer3DModel", "SanaVideoPipeline", target="standalone"
    )
    assert "Standalone target" in standalone and "checkout" not in standalone
    (checkout,) = shadowing_warnings(
        "SanaVideoTransformer3DModel", "SanaVideoPipeline", target="cache-dit-checkout"
    )
    assert "branch on the transformer class to the 'Sana' factory (sana_adapter)" in checkout
    assert "Standalone" not in checkout


def test_registries_read_the_forcing_prefixes_and_factory_classes() -> None:
    from lsp_server.analysis.registry_facts import read_registries

    regs = read_registries()
    assert "Wan" in regs.separate_cfg_prefixes and "Sana" not in regs.separate_cfg_prefixes
    assert regs.separate_cfg_location is not None
    assert regs.separate_cfg_location.endswith("block_adapters/block_registers.py:23")
    wan = regs.first_match("adapter", "WanLitePipeline")
    assert wan is not None and wan.sets_separate_cfg
    assert "WanTransformer3DModel" in wan.handled_names
    assert "WanLiteTransformer3DModel" not in wan.handled_names


# ----------------------------------------------------------------------------- WanLite


@pytest.fixture(scope="module")
def wan_lite(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, ModuleType]:
    return _generate_modules(
        tmp_path_factory.mktemp("wan_lite"),
        "wan_lite",
        str(WAN_LITE),
        None,
        str(WAN_LITE_PIPELINE),
        "WanLitePipeline",
    )


def _wan_lite_pipe() -> tuple[Any, Any, Callable[[], Any]]:
    models = load_module("wan_lite_video", WAN_LITE)
    pipelines = load_module("wan_lite_pipeline", WAN_LITE_PIPELINE)
    torch.manual_seed(0)
    model = models.WanLiteTransformer3DModel().eval()
    # a fresh class per pipe: cache-dit patches `__call__` on the class
    cls = type("WanLitePipeline", (pipelines.WanLitePipeline,), {})
    pipe = cls(transformer=model)
    g = torch.Generator().manual_seed(1)
    latents = torch.randn(1, 4, 2, 8, 8, generator=g)
    prompt, negative = torch.randn(1, 6, 16, generator=g), torch.randn(1, 6, 16, generator=g)

    def call() -> Any:
        return pipe(prompt, negative, latents, num_inference_steps=STEPS)[0]

    return pipe, model, call


def _cache_config() -> Any:
    return cache_dit.DBCacheConfig(
        Fn_compute_blocks=1, Bn_compute_blocks=0, residual_diff_threshold=10.0, max_warmup_steps=1
    )


def test_wan_lite_plain_block_adapter_is_overridden_by_the_registry() -> None:
    """The failure class: cache-dit's own path turns separate CFG on and edits the config."""
    from cache_dit import BlockAdapter, ForwardPattern

    pipe, model, call = _wan_lite_pipe()
    config = _cache_config()
    adapter = BlockAdapter(
        pipe=pipe,
        transformer=model,
        blocks=model.blocks,
        forward_pattern=ForwardPattern.Pattern_2,
        has_separate_cfg=False,
    )
    cache_dit.enable_cache(adapter, cache_config=config)
    assert _context_cfg(model) is True and config.enable_separate_cfg is True
    call()
    assert any(s.cfg_cached_steps for s in cache_dit.summary(pipe))  # one call per step, split


def test_wan_lite_generated_enable_keeps_the_plans_cfg(wan_lite: dict[bool, ModuleType]) -> None:
    module = wan_lite[False]
    pipe, model, call = _wan_lite_pipe()
    with torch.no_grad():
        baseline = call()
    config = _cache_config()
    module.enable(pipe, cache_config=config)
    assert _context_cfg(model) is False
    assert config.enable_separate_cfg is None  # the caller's object is untouched
    output = call()
    stats = cache_dit.summary(pipe)
    assert stats and all(s.cached_steps for s in stats)
    assert not any(s.cfg_cached_steps for s in stats)
    assert len(stats[0].cached_steps) > STEPS // 2  # every step after warmup is one branch
    assert torch.isfinite(output).all() and output.shape == baseline.shape


def test_wan_lite_plan_with_separate_cfg_and_explicit_values(
    wan_lite: dict[bool, ModuleType],
) -> None:
    pipe, model, _ = _wan_lite_pipe()
    wan_lite[True].enable(pipe, cache_config=_cache_config())
    assert _context_cfg(model) is True
    # a value the caller sets explicitly wins over the plan's
    pipe, model, _ = _wan_lite_pipe()
    config = _cache_config()
    config.enable_separate_cfg = True
    wan_lite[False].enable(pipe, cache_config=config)
    assert _context_cfg(model) is True and config.enable_separate_cfg is True
    # no config at all: cache-dit's default DBCacheConfig, with the plan's CFG setting
    pipe, model, _ = _wan_lite_pipe()
    wan_lite[False].enable(pipe)
    assert _context_cfg(model) is False


def test_wan_lite_generation_warns_with_standalone_advice(tmp_path: Path) -> None:
    analysis = analyze_path(WAN_LITE, None, WAN_LITE_PIPELINE)
    answers = {
        "target": {"kind": "standalone", "path": str(tmp_path / "cdit_wan_lite.py")},
        "model": {"pipelineClass": "WanLitePipeline"},
    }
    plan, errors = parse_plan(build_plan(analysis.to_json(), answers))
    assert plan is not None, errors
    result = generate(plan, manifest_path=tmp_path / ".cdit" / "generated.json")
    shadow = [w for w in result.warnings if "registers BlockAdapter 'Wan'" in w]
    assert len(shadow) == 1 and "Standalone target: call the generated `enable()`" in shadow[0]
    assert "checkout" not in shadow[0]


# ----------------------------------------------------------------------------- SanaVideo


@pytest.fixture(scope="module")
def sana_video(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, ModuleType]:
    return _generate_modules(
        tmp_path_factory.mktemp("sana_video"),
        "sana_video",
        SANA_VIDEO,
        "SanaVideoTransformer3DModel",
        SANA_VIDEO_PIPELINE,
        "SanaVideoPipeline",
    )


def _sana_video_pipe() -> tuple[Any, Any]:
    from diffusers import SanaVideoPipeline, SanaVideoTransformer3DModel

    torch.manual_seed(0)
    model = SanaVideoTransformer3DModel(
        in_channels=4,
        out_channels=4,
        num_attention_heads=2,
        attention_head_dim=8,
        num_layers=2,
        num_cross_attention_heads=2,
        cross_attention_head_dim=8,
        cross_attention_dim=16,
        caption_channels=16,
        sample_size=8,
        rope_max_seq_len=32,
    ).eval()
    cls = type("SanaVideoPipeline", (SanaVideoPipeline,), {})
    pipe = cls(tokenizer=None, text_encoder=None, vae=None, transformer=model, scheduler=None)
    return pipe, model


def test_sana_video_plain_block_adapter_hits_the_sana_factory() -> None:
    from cache_dit import BlockAdapter, ForwardPattern

    pipe, model = _sana_video_pipe()
    adapter = BlockAdapter(
        pipe=pipe,
        transformer=model,
        blocks=model.transformer_blocks,
        forward_pattern=ForwardPattern.Pattern_3,
        has_separate_cfg=False,
    )
    with pytest.raises(AssertionError, match="SanaTransformer2DModel"):
        cache_dit.enable_cache(adapter, cache_config=cache_dit.DBCacheConfig())


def test_sana_video_generated_enable_uses_its_own_adapter(
    sana_video: dict[bool, ModuleType],
) -> None:
    pipe, model = _sana_video_pipe()
    config = cache_dit.DBCacheConfig(
        num_inference_steps=4, Fn_compute_blocks=1, Bn_compute_blocks=0, max_warmup_steps=0
    )
    sana_video[False].enable(pipe, cache_config=config)
    assert _context_cfg(model) is False and config.enable_separate_cfg is None
    assert pipe._context_kwargs["cache_config"].enable_separate_cfg is False

    pipe, model = _sana_video_pipe()
    sana_video[True].enable(pipe, cache_config=cache_dit.DBCacheConfig(num_inference_steps=4))
    assert _context_cfg(model) is True


def test_shadowing_is_read_from_the_registry_code_not_from_names(tmp_path: Path) -> None:
    """A synthetic cache-dit: other names, another forcing-list attribute; same facts."""
    import textwrap

    from lsp_server.analysis.registry_facts import read_registries

    root = tmp_path / "cache_dit"
    files = {
        "__init__.py": "",
        "caching/__init__.py": "",
        "caching/block_adapters/__init__.py": "from .adapters import zeta_adapter\n",
        "caching/block_adapters/block_registers.py": """
            class BlockAdapterRegister:
                _adapters = {}
                _split_by_name = ["Zeta", "Omicron"]
                _unrelated = ["Zeta"]

                @classmethod
                def register(cls, name, supported=True):
                    def wrap(func):
                        cls._adapters[name] = func
                        return func
                    return wrap

                @classmethod
                def get_adapter(cls, pipe):
                    for name in cls._adapters:
                        if type(pipe).__name__.startswith(name):
                            return cls._adapters[name](pipe)

                @classmethod
                def has_separate_cfg(cls, pipe):
                    for name in cls._split_by_name:
                        if type(pipe).__name__.startswith(name):
                            return True
                    return False
            """,
        "caching/block_adapters/adapters.py": """
            from .block_registers import BlockAdapterRegister

            @BlockAdapterRegister.register("Zeta")
            def zeta_adapter(pipe, **kwargs):
                from diffusers import ZetaTransformer2DModel

                assert isinstance(pipe.transformer, ZetaTransformer2DModel)
                return BlockAdapter(pipe=pipe, has_separate_cfg=True, **kwargs)
            """,
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    regs = read_registries(root)
    assert regs.adapters == ("Zeta",)
    assert regs.separate_cfg_prefixes == ("Zeta", "Omicron")
    zeta = regs.entries("adapter")[0]
    assert zeta.sets_separate_cfg and "ZetaTransformer2DModel" in zeta.handled_names

    novel = shadowing_warnings("ZetaLiteTransformer2DModel", "ZetaLitePipeline", registries=regs)
    assert len(novel) == 2
    assert "BlockAdapter 'Zeta'" in novel[0] and "(True there)" in novel[0]
    assert "starts with 'Zeta'" in novel[1] and "block_registers.py:3" in novel[1]
    own = shadowing_warnings("ZetaTransformer2DModel", "ZetaPipeline", registries=regs)
    assert len(own) == 1 and "starts with 'Zeta'" in own[0]  # its own adapter: no shadowing
    assert (
        shadowing_warnings("OmicronX", "OmicronPipeline", registries=regs, separate_cfg=True) == ()
    )
