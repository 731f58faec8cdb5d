"""`render_sdpa_routes`: attention that calls SDPA itself, routed through cache-dit's CP
attention, one test per rule.

`_route_sdpa` is run against stand-ins for `torch.nn.functional`, cache-dit's dispatch and the
transformer's modules (no tensors, no torch import): SDPA is wrapped once per process; a call
is routed only while a module of the split region running a listed class is active; the bare
names a module bound to SDPA are rebound to the wrapper.
"""

from __future__ import annotations

import sys
import textwrap
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from render_cases import (
    WIDTH,
    assert_code,
    assert_parses,
    code,
    run_generated,
    top_level,
    top_level_names,
)

from lsp_server.codegen.render_sdpa_routes import ROUTE_FUNCTION, sdpa_routes_code

ROUTES = (("AttnProcessor2_0", "processor", ()), ("Attention", "module", ("sdpa",)))


def test_routes_and_region_are_module_constants() -> None:
    text = sdpa_routes_code(ROUTES, ("blocks", "single"), WIDTH)
    assert_parses(text)
    assert top_level_names(text) == ["_SDPA_ROUTES", "_SDPA_REGION", ROUTE_FUNCTION]
    assert_code(
        text.split("\n\n\n")[0] + "\n",
        code(
            """
            _SDPA_ROUTES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
                ("AttnProcessor2_0", "processor", ()),
                ("Attention", "module", ("sdpa", )),
            )
            _SDPA_REGION = ("blocks", "single",)  # block lists split; empty: all
            """
        ),
    )


def test_an_empty_region_routes_the_whole_transformer() -> None:
    text = sdpa_routes_code(ROUTES[:1], (), WIDTH)
    assert "\n_SDPA_REGION = ()  # block lists split; empty: all\n" in text


def test_route_function_reads_the_cp_config_after_enable_cache() -> None:
    function = top_level(sdpa_routes_code(ROUTES, (), WIDTH), ROUTE_FUNCTION)
    after_docstring = function.split('    """\n', 1)[1]
    assert_code(
        textwrap.dedent(after_docstring.split("    routed = ")[0]),
        code(
            """
            import sys

            import torch.nn.functional as F
            from cache_dit.attention import _dispatch_attention_fn

            config = getattr(transformer, '_cp_config', None)
            if config is None:
                return
            """
        ),
    )


# ----------------------------------------------------------------------------- run


class _T:
    """A tensor stand-in: names its layout changes."""

    def __init__(self, name: str, dims: int = 4) -> None:
        self.name, self.dims = name, dims

    def dim(self) -> int:
        return self.dims

    def transpose(self, a: int, b: int) -> _T:
        return _T(f"{self.name}^T", self.dims)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _T) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


class _Module:
    """A module stand-in with forward hooks."""

    def __init__(self, processor: Any = None) -> None:
        if processor is not None:
            self.processor = processor
        self.hooks: list[Any] = []

    def register_forward_pre_hook(self, hook: Any) -> None:
        self.hooks.append(("pre", hook))

    def register_forward_hook(self, hook: Any, always_call: bool = False) -> None:
        assert always_call  # the active stack is popped on exceptions too
        self.hooks.append(("post", hook))

    def run(self, body: Any) -> Any:
        for kind, hook in self.hooks:
            if kind == "pre":
                hook(self, ())
        try:
            return body()
        finally:
            for kind, hook in self.hooks:
                if kind == "post":
                    hook(self, (), None)


@pytest.fixture
def sdpa(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """Fake `torch.nn.functional`, cache-dit dispatch and a model module binding `sdpa`."""
    calls: list[tuple[str, Any]] = []

    def original(query: Any, key: Any, value: Any, attn_mask: Any = None, **kwargs: Any) -> Any:
        calls.append(("original", query))
        return query

    def dispatch(query: Any, key: Any, value: Any, attn_mask: Any, **kwargs: Any) -> Any:
        calls.append(("dispatch", query, kwargs["cp_config"]))
        functional.scaled_dot_product_attention(query, key, value)  # cache-dit's own kernel
        return query

    functional = ModuleType("torch.nn.functional")
    functional.scaled_dot_product_attention = original  # type: ignore[attr-defined]
    torch = ModuleType("torch")
    torch.nn = SimpleNamespace(functional=functional, Module=object)  # type: ignore[attr-defined]
    torch.Tensor = _T  # type: ignore[attr-defined]
    attention = ModuleType("cache_dit.attention")
    attention._dispatch_attention_fn = dispatch  # type: ignore[attr-defined]
    model_module = ModuleType("acme_attention")
    model_module.sdpa = original  # type: ignore[attr-defined]
    model_module.other = original  # type: ignore[attr-defined]
    for name, module in (
        ("torch", torch),
        ("torch.nn", torch.nn),
        ("torch.nn.functional", functional),
        ("cache_dit", ModuleType("cache_dit")),
        ("cache_dit.attention", attention),
        ("acme_attention", model_module),
    ):
        monkeypatch.setitem(sys.modules, name, module)
    processor = type("AttnProcessor2_0", (), {"__module__": "acme_attention"})
    attention_class = type("Attention", (_Module,), {"__module__": "acme_attention"})
    return SimpleNamespace(
        calls=calls,
        original=original,
        functional=functional,
        model_module=model_module,
        processor=processor,
        attention_class=attention_class,
        torch=torch,
    )


def _route(sdpa: SimpleNamespace, modules: list[tuple[str, Any]], config: str = "cp") -> None:
    scope = run_generated(sdpa_routes_code(ROUTES, ("blocks",), WIDTH), torch=sdpa.torch)
    transformer = SimpleNamespace(_cp_config=config, named_modules=lambda: iter(modules))
    scope[ROUTE_FUNCTION](transformer)


def test_sdpa_is_wrapped_once_per_process(sdpa: SimpleNamespace) -> None:
    _route(sdpa, [])
    wrapper = sdpa.functional.scaled_dot_product_attention
    assert wrapper is not sdpa.original and wrapper._cdit_original is sdpa.original
    _route(sdpa, [], config="another transformer's")
    assert sdpa.functional.scaled_dot_product_attention is wrapper


def test_no_cp_config_routes_nothing(sdpa: SimpleNamespace) -> None:
    _route(sdpa, [("blocks.0.attn", _Module(sdpa.processor()))], config=None)  # type: ignore[arg-type]
    assert sdpa.functional.scaled_dot_product_attention is sdpa.original


def test_calls_are_routed_only_while_a_region_module_runs(sdpa: SimpleNamespace) -> None:
    inside = _Module(sdpa.processor())
    outside = _Module(sdpa.processor())
    _route(sdpa, [("blocks.0.attn", inside), ("refiner.0.attn", outside)])
    assert outside.hooks == [] and len(inside.hooks) == 2 and inside._cdit_sdpa_routed
    wrapper = sdpa.functional.scaled_dot_product_attention
    q = _T("q")
    wrapper(q, _T("k"), _T("v"))  # no module running: the original
    inside.run(lambda: wrapper(q, _T("k"), _T("v")))
    outside.run(lambda: wrapper(q, _T("k"), _T("v")))
    assert sdpa.calls == [
        ("original", q),
        # cache-dit's layout (batch, tokens, heads, dim); its own SDPA call runs unrouted
        ("dispatch", _T("q^T"), "cp"),
        ("original", _T("q^T")),
        ("original", q),
    ]


def test_a_routed_call_needs_four_dimensional_inputs(sdpa: SimpleNamespace) -> None:
    inside = _Module(sdpa.processor())
    _route(sdpa, [("blocks.0.attn", inside)])
    wrapper = sdpa.functional.scaled_dot_product_attention
    with pytest.raises(ValueError, match="got 3-D inputs"):
        inside.run(lambda: wrapper(_T("q", 3), _T("k", 3), _T("v", 3)))
    wrapper(_T("q"), _T("k"), _T("v"))  # the failed call left the module: unrouted again
    assert sdpa.calls[-1][0] == "original"


def test_a_module_class_rebinds_its_bare_sdpa_names(sdpa: SimpleNamespace) -> None:
    module = sdpa.attention_class()
    _route(sdpa, [("blocks.0.attn", module)])
    wrapper = sdpa.functional.scaled_dot_product_attention
    assert sdpa.model_module.sdpa is wrapper  # listed for `Attention`
    assert sdpa.model_module.other is sdpa.original  # not listed
    assert len(module.hooks) == 2


def test_a_module_is_routed_once(sdpa: SimpleNamespace) -> None:
    inside = _Module(sdpa.processor())
    _route(sdpa, [("blocks.0.attn", inside)])
    _route(sdpa, [("blocks.0.attn", inside)])
    assert len(inside.hooks) == 2


def test_flash_attn_func_is_rebound_to_a_dispatch_in_its_own_layout(
    sdpa: SimpleNamespace,
) -> None:
    """A bare `flash_attn_func` of a routed class's module is rebound (once) to a wrapper that
    calls cache-dit's dispatch with the same `(batch, tokens, heads, dim)` tensors (no
    transposes, `causal` / `softmax_scale` passed on) while a region module runs, and the
    original flash-attn function otherwise. Without `flash_names` nothing of it is written."""
    assert "_FLASH_NAMES" not in sdpa_routes_code(ROUTES, ("blocks",), WIDTH)

    def flash(q: Any, k: Any, v: Any, **kwargs: Any) -> Any:
        sdpa.calls.append(("flash", q, kwargs))
        return q

    flash.__module__ = "flash_attn"
    sdpa.model_module.flash_attn_func = flash  # type: ignore[attr-defined]
    routes = (("Attention", "module", ("sdpa", "flash_attn_func")),)
    text = sdpa_routes_code(routes, ("blocks",), WIDTH, ("flash_attn_func",))
    assert '\n_FLASH_NAMES = ("flash_attn_func",)\n' in text
    scope = run_generated(text, torch=sdpa.torch)
    module = sdpa.attention_class()
    transformer = SimpleNamespace(
        _cp_config="cp", named_modules=lambda: iter([("blocks.0.attn", module)])
    )
    scope[ROUTE_FUNCTION](transformer)
    routed = sdpa.model_module.flash_attn_func
    assert routed is not flash
    scope[ROUTE_FUNCTION](transformer)  # a second call keeps the wrapper
    assert sdpa.model_module.flash_attn_func is routed
    q = _T("q")
    routed(q, _T("k"), _T("v"), causal=True)
    module.run(lambda: routed(q, _T("k"), _T("v"), softmax_scale=0.5))
    assert sdpa.calls == [
        ("flash", q, {"dropout_p": 0.0, "softmax_scale": None, "causal": True}),
        ("dispatch", q, "cp"),  # the same layout: no transposes
        ("original", q),  # cache-dit's own kernel inside the dispatch runs unrouted
    ]


def test_a_flash_name_the_module_does_not_bind_is_left_alone(sdpa: SimpleNamespace) -> None:
    """flash-attn not installed: a module that imports `flash_attn_func` under `try` and falls
    back to SDPA binds no such name; routing must not stop on it (it raised KeyError at
    `enable()`), and its SDPA is still routed."""
    routes = (("Attention", "module", ("sdpa", "flash_attn_func")),)
    text = sdpa_routes_code(routes, ("blocks",), WIDTH, ("flash_attn_func",))
    scope = run_generated(text, torch=sdpa.torch)
    module = sdpa.attention_class()
    transformer = SimpleNamespace(
        _cp_config="cp", named_modules=lambda: iter([("blocks.0.attn", module)])
    )
    scope[ROUTE_FUNCTION](transformer)
    assert not hasattr(sdpa.model_module, "flash_attn_func")
    q = _T("q")
    module.run(lambda: sdpa.model_module.sdpa(q, _T("k"), _T("v")))
    assert [(c[0], c[-1]) for c in sdpa.calls[:1]] == [("dispatch", "cp")]
