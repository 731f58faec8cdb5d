"""Parsing the plan's parts: cache, context parallelism, tensor parallelism, components.

Each part is read with its own `Reader` (`plan_parse.parse_plan` makes one per part), so that its
errors refuse only that part; a disabled part's errors are ignored. The value checks here are
the document's rules for each part (a CP module key, a TP key `<list>.*.<path>`, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .plan_axis_split import parse_axis_split
from .plan_model import (
    COMPONENT_KINDS,
    FORWARD_PATTERNS,
    TP_KEY_FORM,
    TP_KEY_PATTERN,
    TP_STYLES,
    BlockListPlan,
    CachePlan,
    ComponentPlan,
    ContextParallelPlan,
    FieldError,
    FunctorReason,
    MaskReorder,
    Rearrangement,
    StreamMask,
    TensorParallelPlan,
    component_part,
)
from .plan_reader import IDENTIFIER, LIST_PATH, MODULE_KEY_ATOM, Reader, type_name

# ----------------------------------------------------------------------------- cache


def parse_cache(r: Reader, c: Mapping[str, Any]) -> CachePlan:
    """The cache part (errors go to `r`; the caller ignores them when the part is disabled)."""
    enabled = r.get(c, "enabled", "cache", bool, default=True)
    lists = _parse_block_lists(r, c)
    separate = r.get(c, "hasSeparateCfg", "cache", bool, default=False)
    pf = r.obj(c.get("patchFunctor", {}), "cache.patchFunctor") or {}
    functor = r.get(pf, "enabled", "cache.patchFunctor", bool, default=False)
    reasons = _parse_functor_reasons(r, pf)
    if functor and not reasons:
        r.error("cache.patchFunctor.reasons", "a PatchFunctor needs at least one reason")
    return CachePlan(
        block_lists=tuple(lists),
        has_separate_cfg=bool(separate),
        patch_functor=bool(functor),
        functor_reasons=tuple(reasons),
        enabled=bool(enabled),
    )


def _parse_block_lists(r: Reader, c: Mapping[str, Any]) -> list[BlockListPlan]:
    """`cache.blockLists`: a non-empty array (else the analysis' `notCacheable` is the error)."""
    lists_raw = c.get("blockLists")
    lists: list[BlockListPlan] = []
    if not isinstance(lists_raw, list) or not lists_raw:
        why = c.get("notCacheable")
        r.error(
            "cache.blockLists",
            str(why) if why else "must be a non-empty array of block lists",
        )
        return lists
    seen: set[str] = set()
    for i, item in enumerate(lists_raw):
        block_list = _parse_block_list(r, item, f"cache.blockLists[{i}]", seen)
        if block_list is not None:
            lists.append(block_list)
    return lists


def _parse_block_list(r: Reader, item: Any, p: str, seen: set[str]) -> BlockListPlan | None:
    """One block list; `seen`: the attributes of the lists before it (a list is listed once)."""
    b = r.obj(item, p)
    if b is None:
        return None
    attr = r.get(
        b,
        "attr",
        p,
        str,
        required=True,
        pattern=LIST_PATH,
        pattern_message="is not an attribute name (or `<dict>.<key>`, `<list>.<index>`)",
    )
    pattern = r.get(b, "forwardPattern", p, str, required=True, choices=FORWARD_PATTERNS)
    if isinstance(attr, str):
        if attr in seen:
            r.error(f"{p}.attr", f"block list {attr!r} is listed twice")
        seen.add(attr)
    if not (isinstance(attr, str) and pattern in FORWARD_PATTERNS):
        return None
    return BlockListPlan(
        attr=attr,
        forward_pattern=pattern,
        check_forward_pattern=r.get(b, "checkForwardPattern", p, bool, default=True),
        check_num_outputs=r.get(b, "checkNumOutputs", p, bool, default=False),
        block_class=r.get(b, "blockClass", p, str),
        block_class_path=r.get(b, "blockClassPath", p, str),
        block_class_line=r.get(b, "blockClassLine", p, int),
        continues=r.get(b, "continues", p, str),
        container=r.get(
            b, "container", p, str, default="ModuleList", choices=("ModuleList", "Sequential")
        ),
    )


def _parse_functor_reasons(r: Reader, pf: Mapping[str, Any]) -> list[FunctorReason]:
    """`cache.patchFunctor.reasons`: why a PatchFunctor is needed (kind and line required)."""
    reasons: list[FunctorReason] = []
    raw_reasons = pf.get("reasons", [])
    if not isinstance(raw_reasons, list):
        r.error("cache.patchFunctor.reasons", "expected an array")
        raw_reasons = []
    for i, item in enumerate(raw_reasons):
        p = f"cache.patchFunctor.reasons[{i}]"
        o = r.obj(item, p)
        if o is None:
            continue
        kind = r.get(o, "kind", p, str, required=True)
        line = r.get(o, "line", p, int, required=True)
        if isinstance(kind, str) and isinstance(line, int):
            reasons.append(
                FunctorReason(
                    kind=kind,
                    message=r.get(o, "message", p, str, default=""),
                    line=line,
                    block_list=r.get(o, "blockList", p, str),
                    severity=r.get(o, "severity", p, str, default="high"),
                )
            )
    return reasons


# ----------------------------------------------------------------------------- context parallelism


def parse_context_parallel(r: Reader, data: Any) -> ContextParallelPlan:
    c = r.obj(data, "contextParallel", required=False)
    if c is None:
        return ContextParallelPlan()
    p = "contextParallel"
    enabled = r.get(c, "enabled", p, bool, default=False)
    plan = r.obj(c.get("plan", {}), f"{p}.plan") or {}
    for key, entry in plan.items():
        _check_cp_entry(r, f"{p}.plan[{key!r}]", key, entry)
    if enabled and not plan:
        r.error(f"{p}.plan", "context parallelism is enabled but the plan is empty")
    patches = r.get(c, "patches", p, list, default=[])
    texts = tuple(str(x.get("message", x)) if isinstance(x, dict) else str(x) for x in patches)
    guard_params, guard_reason = _parse_guard(r, c, "maskGuard", p)
    if enabled:
        # hooks alone would run and be wrong: the part is refused, never left to a comment
        for i, text in enumerate(texts):
            r.error(f"{p}.patches[{i}]", f"needs code the hook plan cannot express: {text}")
    return ContextParallelPlan(
        enabled=bool(enabled),
        approach=r.get(c, "approach", p, str),
        plan=dict(plan),
        ulysses_anything=bool(r.get(c, "ulyssesAnything", p, bool, default=False)),
        patches=texts,
        ring_unsupported=r.get(c, "ringUnsupported", p, str),
        mask_guard_params=guard_params,
        mask_guard_reason=guard_reason,
        ring_masks=bool(r.get(c, "ringMasks", p, bool, default=False)),
        sdpa_routes=_parse_sdpa_routes(r, c, p),
        flash_names=_parse_flash_names(r, c, p),
        kernel_flags=_parse_kernel_flags(r, c, p),
        not_possible=r.get(c, "notPossible", p, str),
        mask_reorder=_parse_reorder(r, c, p),
        stream_masks=_parse_stream_masks(r, c, p),
        axis_split=parse_axis_split(r, c, p),
    )


def _parse_sdpa_routes(
    r: Reader, c: Mapping[str, Any], p: str
) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """`sdpaRoutes` (`[{"class", "owner": "processor" | "module", "names": [...]}]`)."""
    routes = []
    for i, raw in enumerate(r.get(c, "sdpaRoutes", p, list, default=[]) or []):
        where = f"{p}.sdpaRoutes[{i}]"
        names = raw.get("names", []) if isinstance(raw, dict) else None
        if (
            not isinstance(raw, dict)
            or not str(raw.get("class", "")).isidentifier()
            or raw.get("owner") not in ("processor", "module")
            or not isinstance(names, list)
            or not all(isinstance(n, str) and n.isidentifier() for n in names)
        ):
            r.error(where, 'needs an identifier `class`, `owner` "processor" or "module", `names`')
            continue
        routes.append((raw["class"], raw["owner"], tuple(names)))
    return tuple(routes)


def _parse_flash_names(r: Reader, c: Mapping[str, Any], p: str) -> tuple[str, ...]:
    """`flashNames`: bare names bound to `flash_attn_func` in the routed classes' modules."""
    names = r.get(c, "flashNames", p, list, default=[]) or []
    if not all(isinstance(n, str) and n.isidentifier() for n in names):
        r.error(f"{p}.flashNames", "must be a list of identifiers")
        return ()
    return tuple(names)


def _parse_kernel_flags(
    r: Reader, c: Mapping[str, Any], p: str
) -> tuple[tuple[str, str, bool], ...]:
    """`kernelFlags` (`[{"class", "attr", "value": bool}]`): flags the module pins on routed
    modules so their kernel branch runs."""
    flags = []
    for i, raw in enumerate(r.get(c, "kernelFlags", p, list, default=[]) or []):
        ok = (
            isinstance(raw, dict)
            and str(raw.get("class", "")).isidentifier()
            and str(raw.get("attr", "")).isidentifier()
            and isinstance(raw.get("value"), bool)
        )
        if not ok:
            r.error(f"{p}.kernelFlags[{i}]", "needs identifiers `class`, `attr` and a bool `value`")
            continue
        flags.append((raw["class"], raw["attr"], raw["value"]))
    return tuple(flags)


def _parse_stream_masks(r: Reader, c: Mapping[str, Any], p: str) -> tuple[StreamMask, ...]:
    """`streamMasks` (`[{"list", "mask", "stream"}]`)."""
    out = []
    for i, raw in enumerate(r.get(c, "streamMasks", p, list, default=[]) or []):
        names = [raw.get(k) for k in ("list", "mask", "stream")] if isinstance(raw, dict) else []
        if len(names) != 3 or not all(isinstance(n, str) and n.isidentifier() for n in names):
            r.error(f"{p}.streamMasks[{i}]", "needs identifiers `list`, `mask` and `stream`")
            continue
        out.append(StreamMask(names[0], names[1], names[2]))
    return tuple(out)


def _parse_reorder(r: Reader, c: Mapping[str, Any], p: str) -> MaskReorder | None:
    """`maskReorder` (`{"list", "mask", "streams": [first, second]}` or null)."""
    raw = r.obj(c.get("maskReorder"), f"{p}.maskReorder", required=False)
    if not raw:
        return None
    names = [raw.get("list"), raw.get("mask"), *(raw.get("streams") or [])]
    if len(names) != 4 or not all(isinstance(n, str) and n.isidentifier() for n in names):
        r.error(f"{p}.maskReorder", "needs `list`, `mask` and two `streams`, each an identifier")
        return None
    return MaskReorder(names[0], names[1], (names[2], names[3]))


def _parse_guard(r: Reader, c: Mapping[str, Any], key: str, p: str) -> tuple[tuple[str, ...], str]:
    """A mask guard (`{"params": [...], "reason": ...}` or null): the parameter names, why."""
    guard = r.obj(c.get(key), f"{p}.{key}", required=False) or {}
    params = tuple(str(x) for x in guard.get("params", []) if str(x).isidentifier())
    return params, str(guard.get("reason", ""))


def _check_cp_entry(r: Reader, path: str, key: str, entry: Any) -> None:
    atoms = key.split(".") if key else []
    bad = [a for a in atoms if not MODULE_KEY_ATOM.match(a)]
    if bad:
        r.error(path, f"module key has an invalid part {bad[0]!r}")
    if sum(a in ("*", "<each>") for a in atoms) > 1:
        r.error(path, "module key may contain at most one `*` / `<each>`")
    if not isinstance(entry, Mapping):
        r.error(path, f"expected an object, got {type_name(entry)}")
        return
    if "gather_dim" in entry:
        r.get(entry, "gather_dim", path, int, required=True)
        r.get(entry, "expected_dims", path, int)
        outputs = r.get(entry, "outputs", path, int, default=1)
        if isinstance(outputs, int) and outputs < 1:
            r.error(f"{path}.outputs", "must be at least 1")
        skip = entry.get("skip", [])
        if not isinstance(skip, list) or any(
            not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < (outputs or 1)
            for i in skip
        ):
            r.error(f"{path}.skip", "must list output indices below `outputs`")
        return
    for name, split in entry.items():
        if name in ("reason", "line"):
            continue
        items = split if isinstance(split, list) else [split]
        for j, item in enumerate(items):
            where = f"{path}.{name}" + (f"[{j}]" if isinstance(split, list) else "")
            o = r.obj(item, where)
            if o is None:
                continue
            r.get(o, "split_dim", where, int, required=True)
            r.get(o, "expected_dims", where, int)
            out = r.get(o, "split_output", where, bool, default=False)
            if out and not str(name).isdigit():
                r.error(where, 'split_output entries are keyed by output index (`"0"`, `"1"`)')
            if not out and not IDENTIFIER.match(str(name)):
                r.error(where, f"{name!r} is not a parameter name")


# ----------------------------------------------------------------------------- tensor parallelism


def parse_tensor_parallel(r: Reader, data: Any) -> TensorParallelPlan:
    """The TP part. Every module key must be `<list>.*.<path>`: the planner shards the layer at
    `<path>` in each block of `<list>`; no other form is ever emitted."""
    t = r.obj(data, "tensorParallel", required=False)
    if t is None:
        return TensorParallelPlan()
    p = "tensorParallel"
    enabled = bool(r.get(t, "enabled", p, bool, default=False))
    layers = _parse_tp_layers(r, t, p, enabled)
    attrs = _parse_shard_div_attrs(r, t, p)
    conditional = _parse_conditional_layers(r, t, p, layers)
    rearr = _parse_rearrangements(r, t, p)
    norms = _parse_distributed_norms(r, t, p)
    unsafe = [
        n.get("message", str(n)) if isinstance(n, Mapping) else str(n)
        for n in r.get(t, "dtensorUnsafe", p, list, default=[])
    ]
    if enabled:
        _refuse_not_generated(r, p, rearr, unsafe)
    return TensorParallelPlan(
        enabled=enabled,
        attention_strategy=r.get(t, "attentionStrategy", p, str),
        layers={k: v for k, v in layers.items() if isinstance(k, str) and isinstance(v, str)},
        shard_div_attrs=tuple(a for a in attrs if isinstance(a, str)),
        conditional_layers=conditional,
        weight_rearrangement=tuple(rearr),
        distributed_norms=tuple(n for n in norms if isinstance(n, str)),
        dtensor_unsafe=tuple(unsafe),
    )


def _parse_tp_layers(r: Reader, t: Mapping[str, Any], p: str, enabled: bool) -> Mapping[str, Any]:
    """`layers`: TP key -> style."""
    layers = r.obj(t.get("layers", {}), f"{p}.layers") or {}
    for key, style in layers.items():
        if style not in TP_STYLES:
            r.error(f"{p}.layers[{key!r}]", f"{style!r} is not one of {', '.join(TP_STYLES)}")
        if not tp_key_ok(key):
            r.error(f"{p}.layers[{key!r}]", f"layer key must look like {TP_KEY_FORM}")
    if enabled and not layers:
        r.error(f"{p}.layers", "tensor parallelism is enabled but no layer is sharded")
    return layers


def _parse_shard_div_attrs(r: Reader, t: Mapping[str, Any], p: str) -> list[Any]:
    """`shardDivAttrs`: `<list>.*.<path>.<attr>` each (`<list>.*.<attr>`: an attribute of the
    block itself, such as a split size its forward reads)."""
    attrs = r.get(t, "shardDivAttrs", p, list, default=[])
    for i, a in enumerate(attrs):
        if not (tp_key_ok(a) and _path_depth(a) >= 1 and not a.split(".")[-1].isdigit()):
            r.error(f"{p}.shardDivAttrs[{i}]", "must look like `<list>.*.<path>.<attr>`")
    return attrs


def _parse_conditional_layers(
    r: Reader, t: Mapping[str, Any], p: str, layers: Mapping[str, Any]
) -> dict[str, Any]:
    """`conditionalLayers`: key of `layers` -> its condition."""
    cond_raw = r.obj(t.get("conditionalLayers", {}), f"{p}.conditionalLayers") or {}
    conditional = {
        k: (v.get("condition", "") if isinstance(v, Mapping) else str(v))
        for k, v in cond_raw.items()
    }
    for key in conditional:
        if key not in layers:
            r.error(f"{p}.conditionalLayers[{key!r}]", "is not a key of `layers`")
    return conditional


def _parse_rearrangements(r: Reader, t: Mapping[str, Any], p: str) -> list[Rearrangement]:
    """`weightRearrangement`: fused weights to regroup before sharding."""
    rearr: list[Rearrangement] = []
    for i, item in enumerate(r.get(t, "weightRearrangement", p, list, default=[])):
        where = f"{p}.weightRearrangement[{i}]"
        o = r.obj(item, where)
        if o is not None and isinstance(o.get("layer"), str) and isinstance(o.get("kind"), str):
            segments = o.get("segments") or []
            if not isinstance(segments, list) or not all(isinstance(x, str) for x in segments):
                r.error(f"{where}.segments", "expected an array of strings")
                segments = []
            for key in (o["layer"], *segments):
                if not tp_key_ok(key):
                    r.error(where, f"{key!r} must look like {TP_KEY_FORM}")
            rearr.append(
                Rearrangement(o["layer"], o["kind"], str(o.get("reason", "")), tuple(segments))
            )
        elif o is not None:
            r.error(where, "needs string `layer` and `kind`")
    return rearr


def _parse_distributed_norms(r: Reader, t: Mapping[str, Any], p: str) -> list[Any]:
    """`distributedNorms`: TP keys of norms to replace (or `{"module": key}`)."""
    norms = [
        n.get("module") if isinstance(n, Mapping) else n
        for n in r.get(t, "distributedNorms", p, list, default=[])
    ]
    for i, n in enumerate(norms):
        if not tp_key_ok(n):
            r.error(f"{p}.distributedNorms[{i}]", f"{n!r} must look like {TP_KEY_FORM}")
    return norms


def _refuse_not_generated(r: Reader, p: str, rearr: list[Rearrangement], unsafe: list[str]) -> None:
    """What the generated planner cannot do itself refuses the part (never a hand-edit note)."""
    for i, item in enumerate(rearr):
        if not _rearrangement_generated(item):
            r.error(
                f"{p}.weightRearrangement[{i}]",
                f"{item.kind} on {item.layer} needs a weight rearrangement that is not "
                f"generated: {item.reason}",
            )
    for i, message in enumerate(unsafe):
        r.error(
            f"{p}.dtensorUnsafe[{i}]",
            f"sharded weights would reach code that takes no DTensor: {message}",
        )


def _rearrangement_generated(item: Rearrangement) -> bool:
    return rearrangement_written(item.kind, bool(item.segments))


def rearrangement_written(kind: Any, has_segments: bool) -> bool:
    """The rearrangements the TP planner writes code for (`render_tp`); a fused out+down layer
    needs its input segments."""
    return kind == "packed_gated" or (kind == "fused_out_down" and has_segments)


def tp_key_ok(key: Any) -> bool:
    """Whether `key` is a TP module key `<list>.*.<path>`."""
    return isinstance(key, str) and TP_KEY_PATTERN.match(key) is not None


def _path_depth(key: str) -> int:
    """Number of dotted parts after the `.*.` of a TP key."""
    return len(key.split(".*.", 1)[1].split("."))


# ----------------------------------------------------------------------------- components


def parse_components(
    r: Reader, data: Any
) -> tuple[tuple[ComponentPlan, ...], dict[int, tuple[bool, list[FieldError]]]]:
    """Components, one part each (TE-P / VAE-P): index -> (generated?, its errors).

    An item with errors is kept (its fields as given, `""` where unusable) so that indices,
    and `to_json`, still match the document; it is refused, never generated."""
    if data is None:
        return (), {}
    if not isinstance(data, list):
        r.error("components", f"expected an array, got {type_name(data)}")
        return (), {}
    out: list[ComponentPlan] = []
    parts: dict[int, tuple[bool, list[FieldError]]] = {}
    for i, item in enumerate(data):
        p = component_part(i)
        rc = Reader()
        o = rc.obj(item, p) or {}
        generate = bool(rc.get(o, "generate", p, bool, default=True))
        component = rc.get(o, "component", p, str, required=True)
        cls = rc.get(
            o, "class", p, str, required=True, pattern=IDENTIFIER, pattern_message="not a class"
        )
        kind = rc.get(o, "kind", p, str, required=True, choices=COMPONENT_KINDS)
        out.append(
            ComponentPlan(
                component=component if isinstance(component, str) else "",
                class_name=cls if isinstance(cls, str) else "",
                kind=kind if isinstance(kind, str) else "",
                library=rc.get(o, "library", p, str, default="transformers"),
                generate=generate,
                source=rc.get(o, "source", p, str),
            )
        )
        parts[i] = (generate, rc.errors)
    return tuple(out), parts
