"""`analyze_path`: source file -> AnalysisResult (the `cdit-integrate analyze` JSON contract)."""

from __future__ import annotations

import ast
import functools
import hashlib
import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .astutil import (
    is_none,
    mentions_gradient_checkpointing,
    names_read,
    not_none_guards,
    param_defaults,
    walk_local,
)
from .block_lists import (
    DECL_SHAPES,
    LOOP_SHAPES,
    BlockCall,
    BlockListDecl,
    LoopSite,
    find_block_list_decls,
    find_loop_sites,
    resolve_count,
)
from .context_parallel import infer_context_parallel
from .forward_pattern import (
    ENCODER,
    HIDDEN,
    BlockSignature,
    PatternChoice,
    choose_pattern,
    pattern_from_loop_targets,
    read_signature,
)
from .imports import check_imports
from .model import (
    SCHEMA_VERSION,
    AnalysisError,
    Diagnostic,
    Evidence,
    RegistryFacts,
    SeparateCfg,
)
from .parallel_input import DEFAULT_PARALLEL_SIZES, ParallelBlockList, ParallelContext
from .patch_functor import (
    Context,
    Reason,
    binding_problem,
    block_list_access_reasons,
    loop_body_reasons,
    pre_loop_taint,
    stream_order_reason,
)
from .sources import ClassRef, Resolver, SourceFile, module_path, read_source
from .tensor_parallel import infer_tensor_parallel

# A list this many times shorter than the longest cached list is a pre/post "refiner": too few
# blocks for DBCache to skip anything useful.
SHORT_LIST_RATIO = 4
SHORT_LIST_MAX = 4


@dataclass
class BlockListResult:
    attr: str
    block_class: str
    block_class_path: str | None
    block_class_line: int | None
    forward_pattern: str | None
    signature_pattern: str | None
    confidence: float
    evidence: list[Evidence]
    order: int
    count: int | None
    count_expr: str | None
    alternatives: list[str] = field(default_factory=list)
    check_forward_pattern: bool | None = None
    check_num_outputs: bool | None = None
    # the cached list whose loop this list's loop directly continues, with the same block call
    # (arguments, targets) and ForwardPattern: the two can be cached as one list (`_continues`)
    continues: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "attr": self.attr,
            "blockClass": self.block_class,
            "forwardPattern": self.forward_pattern,
            "signaturePattern": self.signature_pattern,
            "confidence": round(self.confidence, 2),
            "evidence": [e.to_json() for e in self.evidence],
            "alternatives": self.alternatives,
            "order": self.order,
            "blockCount": self.count,
            "blockCountExpr": self.count_expr,
            "blockClassPath": self.block_class_path,
            "blockClassLine": self.block_class_line,
            "checkForwardPattern": self.check_forward_pattern,
            "checkNumOutputs": self.check_num_outputs,
            "continues": self.continues,
        }


@dataclass
class OtherList:
    attr: str
    block_class: str
    reason: str
    line: int

    def to_json(self) -> dict[str, Any]:
        return {
            "attr": self.attr,
            "blockClass": self.block_class,
            "reason": self.reason,
            "line": self.line,
        }


@dataclass
class TransformerResult:
    class_name: str
    line: int
    is_diffusers_model: bool
    path: str
    block_lists: list[BlockListResult]
    other_lists: list[OtherList]
    patch_reasons: list[Reason]
    separate_cfg: SeparateCfg
    diagnostics: list[Diagnostic]
    registry: RegistryFacts | None
    context_parallel: Any = None  # ContextParallelResult
    tensor_parallel: Any = None  # TensorParallelResult

    @property
    def patch_functor_needed(self) -> bool:
        return any(r.active for r in self.patch_reasons)

    def to_json(self) -> dict[str, Any]:
        return {
            "className": self.class_name,
            "line": self.line,
            "isDiffusersModel": self.is_diffusers_model,
            "blockLists": [b.to_json() for b in self.block_lists],
            "otherBlockLists": [o.to_json() for o in self.other_lists],
            "patchFunctor": {
                "needed": self.patch_functor_needed,
                "reasons": [r.to_json() for r in self.patch_reasons],
            },
            "separateCfg": self.separate_cfg.to_json(),
            "contextParallel": self.context_parallel.to_json() if self.context_parallel else None,
            "tensorParallel": self.tensor_parallel.to_json() if self.tensor_parallel else None,
            "registry": self.registry.to_json() if self.registry else None,
            "diagnostics": [d.to_json() for d in self.diagnostics],
        }


@dataclass
class AnalysisResult:
    path: str
    sha256: str
    transformers: list[TransformerResult]
    pipeline_path: str | None = None
    # the pipeline file's `__call__` signatures (pipeline/call_signature.py), the chosen one first
    call_signatures: list[Any] = field(default_factory=list)  # CallSignature
    # the source file's imports: unresolved ones, and the installed package its relative imports
    # were resolved against (imports.ImportReport.to_json)
    imports: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        pipeline = None
        if self.pipeline_path:
            signatures = [s.to_json() for s in self.call_signatures]
            pipeline = {
                "path": self.pipeline_path,
                "callSignature": signatures[0] if signatures else None,
                "otherCallSignatures": signatures[1:],
            }
        return {
            "schemaVersion": SCHEMA_VERSION,
            "source": {"path": self.path, "sha256": self.sha256},
            "pipeline": pipeline,
            "transformers": [t.to_json() for t in self.transformers],
            "imports": self.imports,
        }


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
) -> AnalysisResult:
    """Analyze a transformer source file. Raises `AnalysisError` for input that cannot be read.

    `cp_sizes` / `tp_sizes` are the parallel degrees the pre-flight checks consider; `config_path`
    (the transformer's config.json) gives head counts and block counts; `model_index_path` (the
    pipeline's model_index.json) names the text encoders and VAE for TE-P / VAE-P support.
    """
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
    try:
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


@dataclass
class _ListFacts:
    decl: BlockListDecl
    sites: list[LoopSite]
    elements: list[ClassRef]
    count: int | None


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

    # -- transformer discovery --

    def run(self, class_name: str | None) -> list[TransformerResult]:
        classes = {c.name: c for c in self.source.classes()}
        if class_name is not None and class_name not in classes:
            available = ", ".join(sorted(classes)) or "none"
            raise AnalysisError(
                "unknown-class",
                f"{self.path}: class {class_name} is not defined there (classes: {available})",
            )
        candidates: dict[str, tuple[ClassRef, list[_ListFacts]]] = {}
        wanted = [class_name] if class_name else list(classes)
        for name in wanted:
            ref = ClassRef(name, name, classes[name], self.source)
            lists = self._block_lists(ref)
            if lists:
                candidates[name] = (ref, lists)
        if class_name is None and len(candidates) > 1:
            # A class that another class of the file builds (a block, an MoE layer holding
            # `experts`) is a component, not the model.
            built = _constructed_in_other_classes(classes.values())
            components = {k for k in candidates if k in built}
            if components != set(candidates):
                candidates = {k: v for k, v in candidates.items() if k not in components}
        if not candidates:
            tried = f"Tried lists: {DECL_SHAPES}. Tried loops: {LOOP_SHAPES}."
            if class_name:
                why = self._why_no_lists(
                    ClassRef(class_name, class_name, classes[class_name], self.source)
                )
                raise AnalysisError(
                    "no-block-lists",
                    f"{self.path}: {class_name} has no nn.ModuleList of blocks that forward runs "
                    f"({why}). {tried}",
                )
            found = [
                f"{name}: {why}"
                for name in wanted
                if (why := self._why_no_lists(ClassRef(name, name, classes[name], self.source)))
                and not why.startswith("no `self.")
            ]
            seen = f" ({'; '.join(found[:4])})" if found else ""
            raise AnalysisError(
                "no-transformer",
                f"{self.path}: no transformer found (no class runs an nn.ModuleList of blocks "
                f"in forward){seen}. {tried}",
            )
        return [self._transformer(ref, lists) for ref, lists in candidates.values()]

    def _block_lists(self, cls: ClassRef) -> list[_ListFacts]:
        decls = find_block_list_decls(cls, self.resolver)
        model_decls = {}
        for decl in decls:
            elements = [self._element_class(e.class_name, e.inner) for e in decl.elements]
            elements = [e for e in elements if e is not None]
            if elements:
                model_decls[decl.attr] = (decl, elements)
        if not model_decls:
            return []
        _, sites, _ = find_loop_sites(cls, self.resolver, set(model_decls))
        init = self.resolver.find_method(cls, "__init__")
        out = []
        for attr, (decl, elements) in model_decls.items():
            attr_sites = [s for s in sites if s.attr == attr and s.calls]
            if not attr_sites:
                continue
            count = resolve_count(decl.count_expr, init[0] if init else None, self.config)
            out.append(_ListFacts(decl, attr_sites, elements, count))
        out.sort(key=lambda f: min(s.order for s in f.sites))
        return out

    def _why_no_lists(self, cls: ClassRef) -> str:
        """What was found in `cls` instead of a block list that forward runs."""
        decls = find_block_list_decls(cls, self.resolver)
        if not decls:
            return "no `self.<attr> = nn.ModuleList(...)` in it or its bases"
        parts: list[str] = []
        model_attrs: set[str] = set()
        for decl in decls:
            classes = [e.class_name for e in decl.elements]
            if any(self._element_class(e.class_name, e.inner) for e in decl.elements):
                model_attrs.add(decl.attr)
            elif classes:
                parts.append(
                    f"`{decl.attr}` (line {decl.line}) holds {', '.join(sorted(set(classes)))}, "
                    "not a model-defined block class"
                )
            else:
                parts.append(
                    f"`{decl.attr}` (line {decl.line}): its elements are not built in a "
                    "recognised shape"
                )
        forward, sites, _ = find_loop_sites(cls, self.resolver, model_attrs)
        for attr in sorted(model_attrs):
            attr_sites = [s for s in sites if s.attr == attr]
            if forward is None:
                parts.append(f"`{attr}`: the class has no `forward`")
            elif not attr_sites:
                parts.append(f"`{attr}` is not iterated by a loop of a recognised shape")
            else:
                parts.append(
                    f"`{attr}` is iterated (line {attr_sites[0].loop.lineno}) but no call of "
                    "its blocks was found in the loop"
                )
        return "; ".join(parts)

    def _element_class(self, name: str, inner: list[str]) -> ClassRef | None:
        ref = self.resolver.resolve_class(self.source, name)
        if ref.node is None:
            if ref.qualname.startswith(("torch.", "nn.")):
                return None
            # A function wrapping a module (`zero_module(nn.Linear(...))`) or an unknown class.
            if inner:
                return self._element_class(inner[0], [])
            top = self.source.top_level.get(name)
            if isinstance(top, ast.FunctionDef):
                return None
            return ref
        if self.resolver.find_method(ref, "forward") is None and not self.resolver.is_subclass_of(
            ref, ("Module", "ModelMixin")
        ):
            return None
        if inner:
            ref = ClassRef(ref.name, ref.qualname, ref.node, ref.source)
        return ref

    # -- one transformer --

    def _transformer(self, cls: ClassRef, lists: list[_ListFacts]) -> TransformerResult:
        assert cls.node is not None
        forward_found = self.resolver.find_method(cls, "forward")
        forward = forward_found[0] if forward_found else None
        _, _, visited = find_loop_sites(cls, self.resolver, {f.decl.attr for f in lists})
        is_diffusers = self.resolver.derives_from(cls, "ModelMixin")
        diagnostics: list[Diagnostic] = []
        results: list[BlockListResult] = []
        others: list[OtherList] = []
        reasons: list[Reason] = []
        longest = max(lists, key=lambda f: f.count or 0) if any(f.count for f in lists) else None
        ctx = self._context(cls, forward, lists)
        interleaved = _interleaved_lists(lists)
        prepared = []
        for facts in lists:
            call = _main_call(_main_site(facts.sites))
            sig = self._signature(facts.elements[0], facts.decl)
            aux = self._auxiliary_reason(facts, call, sig, longest, ctx)
            prepared.append((facts, call, sig, aux))
        if all(aux for *_, aux in prepared):
            # Side-branch rules are relative: a model whose only loop collects side outputs
            # (a ControlNet) still caches that loop.
            prepared = [(f, c, s, None) for f, c, s, _ in prepared]
        # Interleaved lists are cached as per-block steps of their lead list; when the lead
        # cannot be cached itself, none of them is.
        auxes = {f.decl.attr: aux for f, _, _, aux in prepared}
        blocked = {attr for attr, group in interleaved.items() if auxes.get(group.lead)}
        merged = [g for a, g in interleaved.items() if a == g.lead and a not in blocked]
        prepared = [
            (
                f,
                c,
                s,
                interleaved[f.decl.attr].refusal()
                if f.decl.attr in blocked
                else interleaved[f.decl.attr].partner_reason()
                if f.decl.attr in interleaved and interleaved[f.decl.attr].lead != f.decl.attr
                else aux,
            )
            for f, c, s, aux in prepared
        ]
        for order, (facts, call, sig, aux) in enumerate(prepared, start=1):
            site = _main_site(facts.sites)
            block = facts.elements[0]
            if aux:
                others.append(OtherList(facts.decl.attr, block.name, aux, facts.decl.line))
                continue
            result, list_reasons = self._block_list(
                facts, site, call, block, sig, order, ctx, forward, is_diffusers
            )
            results.append(result)
            reasons += list_reasons
        cached = {r.attr for r in results}
        reasons += [g.reason() for g in merged if g.lead in cached]
        if blocked and not results:
            group = interleaved[sorted(blocked)[0]]
            diagnostics.append(
                Diagnostic(
                    "error",
                    "CDIT005",
                    f"no block list can be cached: {group.refusal()}",
                    self.path,
                    group.line,
                )
            )
        if forward is not None:
            reasons += block_list_access_reasons(
                visited, [s for f in lists for s in f.sites], cached, ctx
            )
        reasons = _dedupe(reasons)
        for i, r in enumerate(results, start=1):
            r.order = i
        sites = {f.decl.attr: _main_site(f.sites) for f in lists if f.sites}
        for before, after in itertools.pairwise(results):
            if before.attr in sites and after.attr in sites:
                after.continues = _continues(before, after, sites[before.attr], sites[after.attr])
        separate_cfg = self._separate_cfg()
        registry = self._registry(cls.name, separate_cfg.value)
        diagnostics += self._diagnostics(results, reasons, is_diffusers, registry)
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

    def _parallel_context(
        self,
        cls: ClassRef,
        forward: ast.FunctionDef | None,
        prepared: list[tuple[_ListFacts, BlockCall | None, BlockSignature | None, str | None]],
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
                call=call.call if call is not None and not call.checkpoint else None,
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

    def _signature(self, block: ClassRef, decl: BlockListDecl) -> BlockSignature | None:
        found = self.resolver.find_method(block, "forward")
        if found is None:
            return None
        func, owner = found
        path = str(owner.source.path) if owner.source else self.path
        sig = read_signature(func, block.name, path)
        if sig.delegates_to and not sig.returns:
            # `return self.block(...)`: a wrapper; read the wrapped class from the constructor.
            for element in decl.elements:
                for inner_name in element.inner:
                    src = block.source or self.source
                    inner = self.resolver.resolve_class(self.source, inner_name)
                    if inner.node is None and src is not self.source:
                        inner = self.resolver.resolve_class(src, inner_name)
                    inner_found = self.resolver.find_method(inner, "forward")
                    if inner_found:
                        inner_func, inner_owner = inner_found
                        inner_path = str(inner_owner.source.path) if inner_owner.source else path
                        wrapped = read_signature(inner_func, inner.name, inner_path)
                        sig.returns = wrapped.returns
                        return sig
        return sig

    def _auxiliary_reason(
        self,
        facts: _ListFacts,
        call: BlockCall | None,
        sig: BlockSignature | None,
        longest: _ListFacts | None,
        ctx: Context,
    ) -> str | None:
        """Why a block list is a side branch or a short pre-stage rather than a list to cache."""
        site = _main_site(facts.sites)
        if call is not None and sig is not None and sig.params:
            first = _arg_for(call, sig, 0)
            if isinstance(first, ast.Name) and call.targets and first.id not in call.targets:
                return (
                    f"its loop does not update `{first.id}` (the stream it receives); "
                    "it computes side outputs, so there is nothing to cache"
                )
            if (
                isinstance(first, ast.Name)
                and first.id in call.targets
                and not any(_read_after(s.method, first.id, s.loop) for s in facts.sites)
            ):
                return (
                    f"the stream it updates (`{first.id}`) is not used after its loop; "
                    "only its side outputs are, so it is a side branch"
                )
        guards = _optional_guards(site.method, site.loop, ctx.optional_inputs)
        if guards:
            names = ", ".join(f"`{g}`" for g in sorted(guards))
            return f"it runs only when {names} is passed (an optional branch)"
        if (
            longest is not None
            and longest is not facts
            and facts.count
            and longest.count
            and facts.count <= SHORT_LIST_MAX
            and facts.count * SHORT_LIST_RATIO <= longest.count
            and min(s.order for s in facts.sites) < min(s.order for s in longest.sites)
        ):
            return (
                f"a {facts.count}-block pre-stage before the {longest.count}-block "
                f"`{longest.decl.attr}`: too short for DBCache to skip anything useful"
            )
        return None

    def _block_list(
        self,
        facts: _ListFacts,
        site: LoopSite,
        call: BlockCall | None,
        block: ClassRef,
        sig: BlockSignature | None,
        order: int,
        ctx: Context,
        forward: ast.FunctionDef | None,
        is_diffusers: bool,
    ) -> tuple[BlockListResult, list[Reason]]:
        decl = facts.decl
        evidence = [
            Evidence(
                f"`self.{decl.attr}` is an nn.ModuleList of {block.name} "
                f"(built by {decl.built_by})",
                self.path,
                decl.line,
            ),
            Evidence(
                f"forward runs `self.{decl.attr}` (#{order} in execution order)",
                self.path,
                site.loop.lineno,
            ),
        ]
        reasons: list[Reason] = []
        block_path = str(block.source.path) if block.source else None
        block_line = block.node.lineno if block.node else None
        if sig is None:
            choice = PatternChoice(
                None, None, None, False, f"the forward of {block.name} could not be located", 0.1
            )
            if call is not None and call.targets:
                stub = BlockSignature(block.name, self.path, 0, [], True, True, [])
                choice = pattern_from_loop_targets(stub, call.targets, _stream_args(call), None)
        else:
            choice = choose_pattern(
                sig,
                call.targets if call else None,
                _stream_args(call) if call else None,
                _loop_reads(site.loop),
            )
            evidence.append(
                Evidence(
                    f"{block.name}.forward({', '.join(sig.params)}): {choice.reason}",
                    sig.path,
                    sig.line,
                )
            )
            for ret in sig.returns[:3]:
                text = ", ".join(s or "None" for s in ret.streams)
                evidence.append(Evidence(f"returns ({text}) [{ret.via}]", sig.path, ret.line))
        pattern = choice.pattern
        if call is not None and sig is not None and pattern is not None:
            problem = binding_problem(sig, call, pattern)
            if problem and pattern == "Pattern_2" and not binding_problem(sig, call, "Pattern_3"):
                evidence.append(
                    Evidence(
                        f"Pattern_2 would mis-bind the call ({problem}); Pattern_3 keeps it intact",
                        self.path,
                        call.call.lineno,
                    )
                )
                pattern, problem = "Pattern_3", None
                choice.alternatives = []
            if problem:
                reasons.append(
                    Reason(
                        "keyword_binding", problem, call.call.lineno, "high", None, True, decl.attr
                    )
                )
        for s in facts.sites:
            if _in_checkpoint_branch(s):
                continue
            reasons += loop_body_reasons(s, ctx)
        if (
            call is not None
            and sig is not None
            and forward is not None
            and choice.second_stream
            and choice.returns_two
        ):
            reason = stream_order_reason(site, call, choice.second_stream, sig, forward)
            if reason:
                reasons.append(reason)
        check = None
        check_num = None
        if sig is not None:
            names = set(sig.params) | set(sig.kwonly)
            needs = {HIDDEN} | (
                {ENCODER} if pattern in ("Pattern_0", "Pattern_1", "Pattern_2") else set()
            )
            check = bool(is_diffusers and needs <= names)
            annotation = sig.return_annotation or ""
            n = annotation.count("torch.Tensor")
            out_len = 2 if pattern in ("Pattern_0", "Pattern_1", "Pattern_4", "Pattern_5") else 1
            check_num = bool(n) and n == out_len
        result = BlockListResult(
            attr=decl.attr,
            block_class=block.name,
            block_class_path=block_path,
            block_class_line=block_line,
            forward_pattern=pattern,
            signature_pattern=choice.signature_pattern,
            confidence=choice.confidence,
            evidence=evidence,
            order=order,
            count=facts.count,
            count_expr=decl.count_expr,
            alternatives=choice.alternatives,
            check_forward_pattern=check,
            check_num_outputs=check_num,
        )
        if len({e.name for e in facts.elements}) > 1:
            result.evidence.append(
                Evidence(
                    "elements are built from several classes: "
                    + ", ".join(sorted({e.name for e in facts.elements})),
                    self.path,
                    decl.line,
                )
            )
        return result, reasons

    def _context(
        self, cls: ClassRef, forward: ast.FunctionDef | None, lists: list[_ListFacts]
    ) -> Context:
        optional: set[str] = set()
        if forward is not None:
            for name, default in param_defaults(forward).items():
                if is_none(default):
                    optional.add(name)
        first_loop = min(
            (s.loop.lineno for f in lists for s in f.sites if s.method is forward), default=10**9
        )
        taint = pre_loop_taint(forward, optional, first_loop) if forward is not None else {}
        return Context(optional, self._flags(cls), taint, self._pipeline_inputs())

    def _flags(self, cls: ClassRef) -> dict[str, object]:
        """`self.flag = flag` in __init__ -> the flag's config value or default."""
        init = self.resolver.find_method(cls, "__init__")
        if init is None:
            return {}
        func = init[0]
        defaults = param_defaults(func)
        flags: dict[str, object] = {}
        for name, default in defaults.items():
            try:
                value = ast.literal_eval(default)
            except (ValueError, SyntaxError):
                continue
            if self.config and name in self.config:
                value = self.config[name]
            if isinstance(value, bool):
                flags[name] = value
        for node in walk_local(func):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.value, ast.Name)
                and node.value.id in flags
            ):
                target = node.targets[0]
                if isinstance(target, ast.Attribute):
                    flags[target.attr] = flags[node.value.id]
        return flags

    def _pipeline_inputs(self) -> set[str] | None:
        """Keywords the pipeline passes with a real value (None without a pipeline).

        A keyword whose value is `None` or a `__call__` parameter that defaults to None (an
        optional feature such as skip-layer guidance) does not count as passed by default.
        """
        if self.pipeline is None:
            return None
        optional: set[str] = set()
        for node in ast.walk(self.pipeline.tree):
            if isinstance(node, ast.FunctionDef) and node.name == "__call__":
                optional |= {k for k, v in param_defaults(node).items() if is_none(v)}
        names: set[str] = set()
        for node in ast.walk(self.pipeline.tree):
            if isinstance(node, ast.Call):
                for k in node.keywords:
                    if (
                        k.arg
                        and not is_none(k.value)
                        and not (isinstance(k.value, ast.Name) and k.value.id in optional)
                    ):
                        names.add(k.arg)
            elif isinstance(node, ast.Dict):
                names |= {
                    k.value
                    for k in node.keys
                    if isinstance(k, ast.Constant) and isinstance(k.value, str)
                }
        return names

    def _separate_cfg(self) -> SeparateCfg:
        if self.pipeline is None:
            return SeparateCfg(None, (), 0.0)
        try:
            from .pipeline import infer_separate_cfg
        except ImportError:  # pragma: no cover - module is part of the package
            return SeparateCfg(None, (), 0.0)
        return infer_separate_cfg(self.pipeline.path, self.pipeline.text)

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

    def _diagnostics(
        self,
        results: list[BlockListResult],
        reasons: list[Reason],
        is_diffusers: bool,
        registry: RegistryFacts | None,
    ) -> list[Diagnostic]:
        out: list[Diagnostic] = []
        for r in reasons:
            if not r.active:
                out.append(
                    Diagnostic(
                        "info",
                        "CDIT102",
                        f"inactive unless {r.active_when}: {r.message}",
                        self.path,
                        r.line,
                    )
                )
                continue
            out.append(
                Diagnostic(
                    "warning", "CDIT101", f"PatchFunctor needed: {r.message}", self.path, r.line
                )
            )
        for b in results:
            if b.forward_pattern is None:
                out.append(
                    Diagnostic(
                        "warning",
                        "CDIT001",
                        f"no ForwardPattern fits `{b.attr}`: {b.evidence[-1].message}",
                        self.path,
                        b.evidence[0].line,
                    )
                )
            elif b.confidence < 0.6:
                out.append(
                    Diagnostic(
                        "info",
                        "CDIT002",
                        f"ForwardPattern of `{b.attr}` is uncertain "
                        f"({b.forward_pattern}, confidence {b.confidence:.2f})",
                        self.path,
                        b.evidence[0].line,
                    )
                )
            if b.check_forward_pattern is False and is_diffusers:
                out.append(
                    Diagnostic(
                        "info",
                        "CDIT003",
                        f"{b.block_class}.forward does not use cache-dit's stream "
                        "names; set check_forward_pattern=False",
                        self.path,
                        b.evidence[0].line,
                    )
                )
            if b.count is not None and b.count < 2:
                out.append(
                    Diagnostic(
                        "warning",
                        "CDIT004",
                        f"`{b.attr}` has {b.count} block(s): DBCache needs "
                        "Fn_compute_blocks <= the list length and a middle to skip",
                        self.path,
                        b.evidence[0].line,
                    )
                )
        if not is_diffusers and any(r.active for r in reasons):
            out.append(
                Diagnostic(
                    "info",
                    "CDIT103",
                    "not a diffusers model: cache-dit skips PatchFunctors for it "
                    "unless CACHE_DIT_PATCH_FUNCTOR_DISABLE_DIFFUSERS_CHECK=1",
                    self.path,
                    reasons[0].line,
                )
            )
        if registry is not None:
            for note in registry.notes:
                out.append(Diagnostic("info", "CDIT201", note, self.path, 1))
            for warning in registry.warnings:
                out.append(Diagnostic("warning", "CDIT202", warning, self.path, 1))
        return out


@dataclass
class _Interleaving:
    """Lists one loop runs interleaved (`zip(self.l1, self.l2)`): the first is cached, its
    blocks' steps run the other lists' block of the same index (`block_steps`)."""

    lead: str
    group: list[str]
    header: str
    line: int

    @property
    def names(self) -> str:
        return " and ".join(f"`{a}`" for a in self.group)

    def reason(self) -> Reason:
        partners = ", ".join(f"`{a}`" for a in self.group[1:])
        return Reason(
            "interleaved_lists",
            f"{self.names} run interleaved in one loop (`for {self.header}`): cache-dit re-runs "
            "a cached list as one unit, so the loop becomes per-block steps of "
            f"`{self.lead}`, each running block k of {partners} and the work between them",
            self.line,
            block_list=self.lead,
        )

    def partner_reason(self) -> str:
        return (
            f"runs interleaved with `{self.lead}` in one loop (`for {self.header}`, line "
            f"{self.line}): block k runs inside step k of `{self.lead}` (the PatchFunctor's "
            "per-block steps), so it is cached with that list, not on its own"
        )

    def refusal(self) -> str:
        return (
            f"{self.names} run interleaved in one loop (`for {self.header}`, line "
            f"{self.line}): block k of each runs before block k+1 of the other. "
            "cache-dit re-runs each cached list as one unit (it swaps the list for a "
            "one-element list during forward), so that loop would run once: a cached list "
            "would run all its blocks before the other's first, and `zip` would cut the "
            f"other to one block. They can be cached only as per-block steps of `{self.lead}` "
            "(each running a pair and the work between them), and that list is not cacheable "
            "itself, so neither list is proposed for caching"
        )


def _interleaved_lists(lists: list[_ListFacts]) -> dict[str, _Interleaving]:
    """Block lists run interleaved by one loop (`for i, (a, b) in enumerate(zip(self.l1,
    self.l2))`), by attribute (each list of a group maps to the same `_Interleaving`).

    cache-dit re-runs each cached list as one unit: during forward it swaps the list for a
    one-element list whose module runs every block (facts §1.4). Under `zip` that loop body would
    then run once, so the lists cannot be cached as they are. The first list of the `zip` is
    cached instead, with a PatchFunctor that turns the loop into per-block steps: block k of that
    list runs the loop body for index k, calling block k of the other lists itself.
    """
    attrs = {f.decl.attr for f in lists}
    out: dict[str, _Interleaving] = {}
    for facts in lists:
        for site in facts.sites:
            partners = [a for a in site.zipped if a in attrs]
            if not partners or facts.decl.attr in out:
                continue
            order = _zip_order(site.loop.iter)
            group = sorted([facts.decl.attr, *partners], key=lambda a: order.get(a, len(order)))
            target = site.loop.target
            names_ = (
                ", ".join(ast.unparse(e) for e in target.elts)
                if isinstance(target, ast.Tuple)
                else ast.unparse(target)
            )
            header = f"{names_} in {ast.unparse(site.loop.iter)}"
            found = _Interleaving(group[0], group, header, site.loop.lineno)
            for attr in group:
                out.setdefault(attr, found)
    return out


def _zip_order(node: ast.expr) -> dict[str, int]:
    """Positions of the `self.<list>` arguments of the loop's `zip(...)` (through `enumerate`)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id == "enumerate" and node.args:
            return _zip_order(node.args[0])
        if node.func.id == "zip":
            return {
                a.attr: i
                for i, a in enumerate(node.args)
                if isinstance(a, ast.Attribute)
                and isinstance(a.value, ast.Name)
                and a.value.id == "self"
            }
    return {}


def _continues(
    before: BlockListResult, after: BlockListResult, first: LoopSite, second: LoopSite
) -> str | None:
    """`before.attr` when the loop over `after` comes right after the loop over `before` in the
    same body (nothing runs between them), both are plain loops over their whole list, and their
    block calls pass the same arguments to blocks of the same ForwardPattern and assign the same
    names: then running the two lists as one list (`before + after`) is the same computation,
    and cache-dit can cache them as one list with one residual check per step (its own Flux
    adapter does, with `dummy_blocks_names`)."""
    if before.forward_pattern is None or before.forward_pattern != after.forward_pattern:
        return None
    if first.method is not second.method or first.zipped or second.zipped:
        return None
    if not (_whole_list_loop(first) and _whole_list_loop(second)):
        return None
    body = _body_holding(first.method, first.loop)
    if body is None:
        return None
    index = next(i for i, stmt in enumerate(body) if stmt is first.loop)
    if index + 1 >= len(body) or body[index + 1] is not second.loop:
        return None
    calls = [_main_call(first), _main_call(second)]
    if any(c is None or c.has_star for c in calls):
        return None
    a, b = calls
    assert a is not None and b is not None
    same = (
        [ast.dump(x) for x in a.args] == [ast.dump(x) for x in b.args]
        and {k: ast.dump(v) for k, v in a.keywords.items()}
        == {k: ast.dump(v) for k, v in b.keywords.items()}
        and a.targets == b.targets
    )
    return before.attr if same else None


def _whole_list_loop(site: LoopSite) -> bool:
    """`for b in self.<list>:` or `for i, b in enumerate(self.<list>):` (no slice, no zip)."""
    it = site.loop.iter
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate":
        it = it.args[0] if it.args else it
    return (
        isinstance(it, ast.Attribute)
        and it.attr == site.attr
        and isinstance(it.value, ast.Name)
        and it.value.id == "self"
    )


def _body_holding(method: ast.FunctionDef, stmt: ast.stmt) -> list[ast.stmt] | None:
    """The statement list that holds `stmt` directly."""
    for node in ast.walk(method):
        for field_name in ("body", "orelse", "finalbody"):
            body = getattr(node, field_name, None)
            if isinstance(body, list) and any(s is stmt for s in body):
                return body
    return None


def _main_site(sites: list[LoopSite]) -> LoopSite:
    for site in sites:
        if not _in_checkpoint_branch(site) and site.plain_calls:
            return site
    return sites[0]


def _main_call(site: LoopSite) -> BlockCall | None:
    if site.plain_calls:
        return site.plain_calls[0]
    return site.calls[0] if site.calls else None


def _in_checkpoint_branch(site: LoopSite) -> bool:
    """Whether the loop sits in the `if ... gradient_checkpointing:` branch of its method."""
    return id(site.loop) in _checkpoint_loops(site.method)


@functools.lru_cache(maxsize=256)
def _checkpoint_loops(method: ast.FunctionDef) -> frozenset[int]:
    out: set[int] = set()
    for node in walk_local(method):
        if isinstance(node, ast.If) and mentions_gradient_checkpointing(node.test):
            out |= {id(n) for b in node.body for n in ast.walk(b) if isinstance(n, ast.For)}
    return frozenset(out)


def _constructed_in_other_classes(classes: Iterable[ast.ClassDef]) -> set[str]:
    """Names of classes called (instantiated) inside the body of a different class."""
    out: set[str] = set()
    for cls in classes:
        for node in ast.walk(cls):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id != cls.name
            ):
                out.add(node.func.id)
    return out


def _loop_reads(loop: ast.For) -> set[str]:
    return set().union(*(names_read(stmt) for stmt in loop.body))


def _read_after(func: ast.FunctionDef, name: str, loop: ast.For) -> bool:
    end = getattr(loop, "end_lineno", loop.lineno)
    return any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) and n.lineno > end
        for n in walk_local(func)
    )


def _optional_guards(func: ast.FunctionDef, loop: ast.For, optional: set[str]) -> set[str]:
    """Optional inputs that must be passed for `loop` to run (`if x is not None:` around it)."""
    out: set[str] = set()
    for node in walk_local(func):
        if isinstance(node, ast.If) and any(
            child is loop for stmt in node.body for child in ast.walk(stmt)
        ):
            out |= not_none_guards(node.test) & optional
    return out


def _arg_for(call: BlockCall, sig: BlockSignature, index: int) -> ast.expr | None:
    if index < len(call.args):
        return call.args[index]
    if index < len(sig.params):
        return call.keywords.get(sig.params[index])
    return None


def _stream_args(call: BlockCall) -> list[str | None]:
    return [a.id if isinstance(a, ast.Name) else None for a in call.args] + [
        v.id if isinstance(v, ast.Name) else None for v in call.keywords.values()
    ]


def _dedupe(reasons: list[Reason]) -> list[Reason]:
    seen: set[tuple[str, int]] = set()
    out = []
    for r in sorted(reasons, key=lambda r: (r.line, r.kind)):
        key = (r.kind, r.line)
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out
