"""Shared by the tests that run an invented transformer (no pipeline) through its generated
standalone module and cache-dit on CPU: generate the module, then run a few denoising-like calls
with a residual threshold (1e-12: every block computed through cache-dit's wrapper, the no-cache
control; 1.0: steps after the warmup reuse the residual)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsp_server.analysis import analyze_path

STEPS = (0.9, 0.6, 0.3, 0.1)


def generate_standalone(source: Path, cls: str, out: Path) -> dict[str, Any]:
    """Analyze `cls` of `source`, build the plan from default answers, generate and write the
    standalone module `<out>/<cls lower>_integration.py`; the generation result's JSON."""
    from lsp_server.codegen import build_plan, generate, parse_plan, write

    analysis = analyze_path(source, cls, registry=False).to_json()
    target = out / f"{cls.lower()}_integration.py"
    answers = {"target": {"kind": "standalone", "path": str(target)}}
    plan, errors = parse_plan(build_plan(analysis, answers))
    assert plan is not None, errors
    result = generate(plan, manifest_path=out / ".cdit" / "generated.json")
    write(result)
    return result.to_json()


def tokens() -> Any:
    import torch

    return torch.randn(1, 16, 4, generator=torch.Generator().manual_seed(1))


def _nothing() -> tuple[Any, ...]:
    return ()


def run_plain(
    model: Any,
    make_input: Callable[[], Any] = tokens,
    extra: Callable[[], tuple[Any, ...]] = _nothing,
) -> list[Any]:
    """`model(tokens, timestep, *extra())` at each of `STEPS`."""
    import torch

    with torch.no_grad():
        return [model(make_input(), torch.tensor([t]), *extra()) for t in STEPS]


def run_cached(
    module: Any,
    model: Any,
    threshold: float,
    make_input: Callable[[], Any] = tokens,
    bn: int = 0,
    extra: Callable[[], tuple[Any, ...]] = _nothing,
    call: Any = None,
) -> list[Any]:
    """The outputs of `STEPS` calls of `model` (or of `call`, a module that runs it) with the
    generated module's caching enabled on `model` (`bn`: `Bn_compute_blocks`)."""
    import cache_dit

    module.enable(None, transformer=model, cache_config=dbcache_config(threshold, bn))
    try:
        return run_plain(call if call is not None else model, make_input, extra)
    finally:
        cache_dit.disable_cache(model)


def dbcache_config(threshold: float, bn: int = 0) -> Any:
    """The DBCache config of these runs: `len(STEPS)` steps, one warmup step, `Fn=1`."""
    import cache_dit

    return cache_dit.DBCacheConfig(
        num_inference_steps=len(STEPS),
        Fn_compute_blocks=1,
        Bn_compute_blocks=bn,
        residual_diff_threshold=threshold,
        max_warmup_steps=1,
    )


def count_calls(module: Any) -> list[int]:
    """A one-element list counting the calls of `module` (a forward pre-hook)."""
    calls = [0]
    module.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def seeded_model(path: Path, cls: str, name: str) -> Any:
    """Class `cls` of the fixture at `path` built seeded, every parameter perturbed (so that no
    zero-initialised head hides a difference), in eval mode."""
    import torch

    from tests.module_loading import load_module

    module = load_module(name, path)
    torch.manual_seed(0)
    model = getattr(module, cls)().eval()
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.3)
    return model


def without(module_path: Path, code: str, name: str) -> Any:
    """The generated module at `module_path` with the line `code` replaced by `pass`, loaded
    as `name` (a control: the integration without one of its steps)."""
    from module_loading import load_module

    text = module_path.read_text()
    assert code in text, f"{code!r} is not in {module_path}"
    mutant = module_path.with_name(f"{name}.py")
    mutant.write_text(text.replace(code, "pass"))
    return load_module(name, mutant)


def assert_caches_exactly(
    module: Any,
    model: Callable[[], Any],
    make_input: Callable[[], Any],
    extra: Callable[[], tuple[Any, ...]] = _nothing,
    sample: Callable[[Any], Any] = lambda output: output,
) -> list[Any]:
    """The generated `module` on fresh `model()`s: the no-cache control (threshold 1e-12) is
    bit-identical to the plain runs, and forced caching (1.0) changes the last output (caching
    ran). Returns the plain runs' outputs (`sample` picks the tensor out of each)."""
    import torch

    baseline = [sample(o) for o in run_plain(model(), make_input, extra)]
    control = [sample(o) for o in run_cached(module, model(), 1e-12, make_input, extra=extra)]
    assert all(torch.equal(c, b) for c, b in zip(control, baseline, strict=True))
    forced = [sample(o) for o in run_cached(module, model(), 1.0, make_input, extra=extra)]
    assert (forced[-1] - baseline[-1]).abs().max().item() > 1e-3  # caching ran
    return baseline


def cached_module(source: Path, cls: str, out: Path) -> Any:
    """The standalone module generated for `cls` of `source` into `out`, loaded; caching must be
    part of it (not refused)."""
    from tests.module_loading import load_module

    result = generate_standalone(source, cls, out)
    assert "cache" not in [r["part"] for r in result["refused"]], result["refused"]
    return load_module(f"{cls.lower()}_cached", out / f"{cls.lower()}_integration.py")
