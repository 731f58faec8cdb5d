"""`analyze_path`: source file -> AnalysisResult (the `cdit-integrate analyze` JSON contract).

The steps, each in its own module: `list_discovery` (which classes are transformers, their block
lists), `transformer_context` (what the PatchFunctor checks need), `list_interleaving` and
`list_selection` (which lists are cached), `block_list_result` (ForwardPattern and PatchFunctor
reasons per list), `list_continuation` (lists cacheable as one), `transformer_diagnostics`; then
the context- and tensor-parallel plans, the pipeline's CFG style and the registry facts. The
result types are in `analysis_result` (re-exported here).
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

from .analysis_result import AnalysisResult as AnalysisResult
from .analysis_result import BlockListResult as BlockListResult
from .analysis_result import OtherList as OtherList
from .analysis_result import TransformerResult as TransformerResult
from .astutil import cached_walks
from .block_list_result import block_list_result
from .block_loops import find_loop_sites, main_site
from .collector import collector_paused
from .context_parallel import infer_context_parallel
from .context_parallel.token_windows import token_count_change
from .imports import check_imports
from .list_continuation import continues
from .list_discovery import ListFacts, ListFinder
from .list_interleaving import Interleaving, interleaved_lists
from .list_selection import SHORT_LIST_MAX as SHORT_LIST_MAX
from .list_selection import SHORT_LIST_RATIO as SHORT_LIST_RATIO
from .list_selection import PreparedList, select_lists
from .model import AnalysisError, Diagnostic, RegistryFacts, SeparateCfg
from .parallel_input import DEFAULT_PARALLEL_SIZES, ParallelBlockList, ParallelContext
from .patch_functor import Context, Reason, block_list_access_reasons, token_count_reason
from .pipeline.call_arguments import PipelineCall
from .repeated_runs import ORDER_KINDS, run_problems
from .resolver import Resolver
from .sources import ClassRef, SourceFile, module_path, read_source
from .tensor_parallel import infer_tensor_parallel
from .transformer_context import loop_context
from .transformer_diagnostics import transformer_diagnostics

# --- entry point ------------------------------------------------------------------------------


def resolve_target(target: str) -> Path:
    """A file path, or a dotted module name located on sys.path without importing it."""
    path = Path(target)
    if path.exists() or target.endswith(".py") or "/" in target:
        return path
    found = module_path(target, 0, Path.cwd() / "__cdit__.py")
    if found is None:
        raise AnalysisError("file-not-found", f"{target}: no such file or importable module")
    return found


def analyze_path(
    path: str | Path,
    class_name: str | None = None,
    pipeline_path: str | Path | None = None,
    config_path: str | Path | None = None,
    *,
    text: str | None = None,
    registry: bool = True,
    cp_sizes: tuple[int, ...] = DEFAULT_PARALLEL_SIZES,
    tp_sizes: tuple[int, ...] = DEFAULT_PARALLEL_SIZES,
    model_index_path: str | Path | None = None,
    call: PipelineCall | None = None,
) -> AnalysisResult:
    """Analyze a transformer source file. Raises `AnalysisError` for input that cannot be read.

    `cp_sizes` / `tp_sizes` are the parallel degrees the pre-flight checks consider; `config_path`
    (the transformer's config.json) gives head counts and block counts; `model_index_path` (the
    pipeline's model_index.json) names the text encoders and VAE for TE-P / VAE-P support;
    `call`: how the pipeline is called (its arguments and the inputs passed), for
    `has_separate_cfg` of that call instead of the default path's.
    """
    with collector_paused():  # see collector.py
        return _analyze(
            path,
            class_name,
            pipeline_path,
            config_path,
            text,
            registry,
            cp_sizes,
            tp_sizes,
            model_index_path,
            call,
        )


def _analyze(
    path: str | Path,
    class_name: str | None,
    pipeline_path: str | Path | None,
    config_path: str | Path | None,
    text: str | None,
    registry: bool,
    cp_sizes: tuple[int, ...],
    tp_sizes: tuple[int, ...],
    model_index_path: str | Path | None,
    call: PipelineCall | None = None,
) -> AnalysisResult:
    path = resolve_target(str(path))
    source = read_source(path, text)
    config = _read_config(Path(config_path)) if config_path else None
    model_index = _read_config(Path(model_index_path)) if model_index_path else None
    pipeline = read_source(resolve_target(str(pipeline_path))) if pipeline_path else None
    for size in (*cp_sizes, *tp_sizes):
        if not isinstance(size, int) or size < 1:
            raise AnalysisError("bad-size", f"parallel size {size!r} must be a positive integer")
    analyzer = _Analyzer(source, config, pipeline, registry)
    analyzer.cp_sizes, analyzer.tp_sizes, analyzer.model_index = cp_sizes, tp_sizes, model_index
    analyzer.call = call
    try:
        with cached_walks():
            transformers = analyzer.run(class_name)
    except RecursionError:  # nesting that parses but is deeper than the recursive walks reach
        raise AnalysisError("unparsable", f"{path}: nested too deeply to analyze") from None
    imports = check_imports(source)
    for transformer in transformers:
        transformer.diagnostics.extend(imports.diagnostics())
    digest = hashlib.sha256(source.text.encode("utf-8")).hexdigest()
    result = AnalysisResult(
        str(path), digest, transformers, str(pipeline.path) if pipeline else None
    )
    result.imports = imports.to_json()
    if pipeline is not None:
        from .pipeline.call_signature import ordered_signatures

        preferred = model_index.get("_class_name") if model_index else None
        result.call_signatures = ordered_signatures(pipeline, preferred)
    return result


def _read_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AnalysisError("config-not-found", f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AnalysisError("bad-config", f"{path}: not a JSON config ({exc})") from None
    if not isinstance(data, dict):
        raise AnalysisError("bad-config", f"{path}: expected a JSON object")
    return data


class _Analyzer:
    def __init__(
        self,
        source: SourceFile,
        config: dict[str, Any] | None,
        pipeline: SourceFile | None,
        registry: bool,
    ) -> None:
        self.source = source
        self.config = config
        self.pipeline = pipeline
        self.registry = registry
        self.resolver = Resolver()
        self.path = str(source.path)
        self.cp_sizes: tuple[int, ...] = DEFAULT_PARALLEL_SIZES
        self.tp_sizes: tuple[int, ...] = DEFAULT_PARALLEL_SIZES
        self.model_index: dict[str, Any] | None = None
        self.call: PipelineCall | None = None

    def run(self, class_name: str | None) -> list[TransformerResult]:
        finder = ListFinder(self.source, self.resolver, self.config)
        candidates = finder.transformers(class_name)
        return [self._transformer(ref, lists) for ref, lists in candidates]

    # -- one transformer --

    def _transformer(self, cls: ClassRef, lists: list[ListFacts]) -> TransformerResult:
        assert cls.node is not None
        forward_found = self.resolver.find_method(cls, "forward")
        forward = forward_found[0] if forward_found else None
        _, _, visited = find_loop_sites(cls, self.resolver, {f.decl.attr for f in lists})
        is_diffusers = self.resolver.derives_from(cls, "ModelMixin")
        ctx = loop_context(self.resolver, cls, forward, lists, self.config, self.pipeline)
        interleaved = interleaved_lists(lists)
        prepared, blocked, merged = select_lists(
            self.resolver, self.source, lists, ctx, interleaved
        )
        results, others, reasons = self._cache_lists(prepared, ctx, forward, is_diffusers)
        cached = {r.attr for r in results}
        reasons += [g.reason() for g in merged if g.lead in cached]
        diagnostics: list[Diagnostic] = []
        if blocked and not results:
            diagnostics.append(self._no_cacheable_list(interleaved[sorted(blocked)[0]]))
        if forward is not None:
            reasons += block_list_access_reasons(
                visited, [s for f in lists for s in f.sites], cached, ctx
            )
        reasons = _dedupe(reasons)
        _number_and_join(results, lists)
        separate_cfg = self._separate_cfg()
        registry = self._registry(cls.name, separate_cfg.value)
        diagnostics += transformer_diagnostics(self.path, results, reasons, is_diffusers, registry)
        parallel = self._parallel_context(cls, forward, prepared, is_diffusers)
        context_parallel = infer_context_parallel(parallel)
        tensor_parallel = infer_tensor_parallel(parallel)
        diagnostics += context_parallel.warnings + tensor_parallel.warnings
        return TransformerResult(
            cls.name,
            cls.node.lineno,
            is_diffusers,
            self.path,
            results,
            others,
            reasons,
            separate_cfg,
            diagnostics,
            registry,
            context_parallel,
            tensor_parallel,
        )

    def _cache_lists(
        self,
        prepared: list[PreparedList],
        ctx: Context,
        forward: ast.FunctionDef | None,
        is_diffusers: bool,
    ) -> tuple[list[BlockListResult], list[OtherList], list[Reason]]:
        """The result of each list to cache and its PatchFunctor reasons; the other lists with
        why they are not cached."""
        results: list[BlockListResult] = []
        others: list[OtherList] = []
        reasons: list[Reason] = []
        for order, (facts, call, sig, aux) in enumerate(prepared, start=1):
            site = main_site(facts.sites)
            block = facts.elements[0]
            if aux:
                others.append(OtherList(facts.decl.attr, block.name, aux, facts.decl.line))
                continue
            result, list_reasons = block_list_result(
                self.path, facts, site, call, block, sig, order, ctx, forward, is_diffusers
            )
            found = self.resolver.find_method(block, "forward")
            changed = token_count_change(found[0]) if found is not None else None
            if changed is not None:
                list_reasons.append(token_count_reason(site, block.name, *changed))
            results.append(result)
            reasons += list_reasons
        return results, others, reasons

    def _no_cacheable_list(self, group: Interleaving) -> Diagnostic:
        return Diagnostic(
            "error",
            "CDIT005",
            f"no block list can be cached: {group.refusal()}",
            self.path,
            group.line,
        )

    def _parallel_context(
        self,
        cls: ClassRef,
        forward: ast.FunctionDef | None,
        prepared: list[PreparedList],
        is_diffusers: bool,
    ) -> ParallelContext:
        init = self.resolver.find_method(cls, "__init__")
        lists = tuple(
            ParallelBlockList(
                attr=facts.decl.attr,
                block=facts.elements[0],
                elements=tuple(facts.elements),
                cached=aux is None,
                count=facts.count,
                loops=tuple(s.loop for s in facts.sites),
                call=call.direct() if call is not None and not call.checkpoint else None,
                run_order=tuple(
                    (p.what, p.line) for p in run_problems(facts.sites) if p.kind in ORDER_KINDS
                ),
            )
            for facts, call, _sig, aux in prepared
        )
        return ParallelContext(
            resolver=self.resolver,
            source=self.source,
            transformer=cls,
            forward=forward,
            init=init[0] if init else None,
            block_lists=lists,
            is_diffusers=is_diffusers,
            config=self.config,
            cp_sizes=self.cp_sizes,
            tp_sizes=self.tp_sizes,
            pipeline=self.pipeline,
            model_index=self.model_index,
        )

    def _separate_cfg(self) -> SeparateCfg:
        if self.pipeline is None:
            return SeparateCfg(None, (), 0.0)
        try:
            from .pipeline import infer_separate_cfg
        except ImportError:  # pragma: no cover - module is part of the package
            return SeparateCfg(None, (), 0.0)
        told = self.call.values() if self.call is not None else None
        return infer_separate_cfg(self.pipeline.path, self.pipeline.text, call_args=told)

    def _registry(self, class_name: str, separate_cfg: bool | None) -> RegistryFacts | None:
        if not self.registry:
            return None
        try:
            from .registry_facts import registry_facts
        except ImportError:  # pragma: no cover
            return None
        pipeline_class = None
        if self.pipeline is not None:
            for c in self.pipeline.classes():
                if any(isinstance(s, ast.FunctionDef) and s.name == "__call__" for s in c.body):
                    pipeline_class = c.name
                    break
        return registry_facts(class_name, pipeline_class, separate_cfg=separate_cfg)


def _number_and_join(results: list[BlockListResult], lists: list[ListFacts]) -> None:
    """Number the cached lists in run order, and mark each that continues the one before it
    with the same block call (`BlockListResult.continues`)."""
    for i, r in enumerate(results, start=1):
        r.order = i
    sites = {f.decl.attr: main_site(f.sites) for f in lists if f.sites}
    for before, after in itertools.pairwise(results):
        if before.attr in sites and after.attr in sites:
            after.continues = continues(before, after, sites[before.attr], sites[after.attr])


def _dedupe(reasons: list[Reason]) -> list[Reason]:
    seen: set[tuple[str, int]] = set()
    out = []
    for r in sorted(reasons, key=lambda r: (r.line, r.kind)):
        key = (r.kind, r.line)
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out
