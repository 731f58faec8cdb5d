"""The tensor-parallel planner class (generated code).

From the plan's `<list>.*.<path>` layer styles it writes one `parallelize_transformer` that walks
each block list: `shard_div_attr` on the attributes the attention code reshapes with, weight
regrouping where a fused projection needs it (marked `CDIT(<kind>)`), the per-block layer plan
(`ColwiseParallel()`, `RowwiseParallel()`, and their `Replicate` variants), layers that exist
only under a config condition guarded by `_has_submodule`, and distributed RMSNorms for norms
over the whole sharded width. Keys without `.*.` are sharded on the transformer itself.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from .layout import INDENT, call, comment, docstring, module_expr, quote
from .plan import IntegrationPlan

STYLE_CODE = {
    "colwise": "ColwiseParallel()",
    "rowwise": "RowwiseParallel()",
    "colwise_replicate": "ColwiseParallel(output_layouts=Replicate())",
    "rowwise_replicate_input": "RowwiseParallel(input_layouts=Replicate())",
}

HAS_SUBMODULE_HELPER = '''\
def _has_submodule(module: torch.nn.Module, path: str) -> bool:
    """Whether `path` names a submodule (some exist only in some configs)."""
    try:
        module.get_submodule(path)
    except AttributeError:
        return False
    return True
'''

REGROUP_HELPER = '''\
def _regroup(
    linear: torch.nn.Linear, widths: list[int], tp_size: int, dim: int
) -> None:
    """Reorder a fused weight so each rank's shard holds part of every segment.

    `widths`: segment sizes along `dim` (1: input columns of a rowwise layer
    fed by a concatenation; 0: output rows of a colwise layer whose output is
    split into parts).
    """
    with torch.no_grad():
        params = [(linear.weight, dim)]
        if dim == 0 and linear.bias is not None:
            params.append((linear.bias, 0))
        for param, axis in params:
            parts = torch.split(param, widths, dim=axis)
            shards = [part.chunk(tp_size, dim=axis) for part in parts]
            order = [s[rank] for rank in range(tp_size) for s in shards]
            param.copy_(torch.cat(order, dim=axis))
'''

DISTRIBUTED_RMSNORM = '''\
class _DistributedRMSNorm(torch.nn.Module):
    """RMSNorm over a width sharded across the TP group.

    The mean square is averaged over the group with an all-reduce.
    """

    def __init__(self, tp_mesh: Any, norm: torch.nn.Module) -> None:
        super().__init__()
        group = tp_mesh.get_group()
        self.tp_mesh = tp_mesh
        self.eps = getattr(norm, "eps", None) or 1e-6
        self.weight = None
        weight = getattr(norm, "weight", None)
        if weight is not None:
            local = weight.detach().chunk(group.size(), dim=0)[group.rank()]
            self.weight = torch.nn.Parameter(local.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        square = torch.mean(x.float() ** 2, dim=-1, keepdim=True)
        torch.distributed.all_reduce(
            square,
            op=torch.distributed.ReduceOp.AVG,
            group=self.tp_mesh.get_group(),
        )
        out = (x.float() * torch.rsqrt(square + self.eps)).to(x.dtype)
        if self.weight is None:
            return out
        return out * self.weight.to(device=x.device, dtype=x.dtype)
'''


@dataclass
class TpCode:
    code: str  # the planner class
    helpers: list[str] = field(default_factory=list)  # module-level helpers it needs
    applied: list[str] = field(default_factory=list)  # weight regroupings written as code
    uses_replicate: bool = False


@dataclass
class _ListPlan:
    layers: dict[str, str] = field(default_factory=dict)
    attrs: list[tuple[str, str]] = field(default_factory=list)
    conditional: dict[str, str] = field(default_factory=dict)
    rearrange: list[tuple[str, str, str, tuple[str, ...]]] = field(default_factory=list)
    norms: list[str] = field(default_factory=list)


def _split_key(key: str) -> tuple[str, str]:
    """`blocks.*.attn.to_q` -> (`blocks`, `attn.to_q`); a key without `*` -> (``, key)."""
    if ".*." in key:
        head, tail = key.split(".*.", 1)
        return head, tail
    return "", key


def tp_planner_code(
    plan: IntegrationPlan,
    class_name: str,
    *,
    width: int,
    register: str | None = None,
    norm_class: str = "_DistributedRMSNorm",
) -> TpCode:
    """The `TensorParallelismPlanner` subclass source (4-space indentation)."""
    tp = plan.tensor_parallel
    groups = _groups(plan)
    out = TpCode(code="")
    b = INDENT
    lines: list[str] = []
    if register:
        lines.append(f"@TensorParallelismPlannerRegister.register({quote(register)})")
    lines.append(f"class {class_name}(TensorParallelismPlanner):")
    strategy = tp.attention_strategy or "mha"
    lines.extend(
        docstring(
            f"Tensor-parallel planner for `{plan.model.transformer_class}`.\n\n"
            f"Attention strategy: {strategy}.",
            indent=b,
            width=width,
        )
    )
    lines += [
        "",
        f"{b}def _apply(",
        f"{b}{b}self,",
        f"{b}{b}transformer: torch.nn.Module,",
        f"{b}{b}parallelism_config: Any,",
        f"{b}{b}**kwargs: Any,",
        f"{b}) -> tuple[torch.nn.Module, list[dict[str, Any]]]:",
        f"{b}{b}tp_mesh = self.mesh(parallelism_config=parallelism_config)",
        f"{b}{b}return self.parallelize_transformer(",
        f"{b}{b}{b}transformer=transformer,",
        f"{b}{b}{b}tp_mesh=tp_mesh,",
        f"{b}{b})",
        "",
        f"{b}def parallelize_transformer(",
        f"{b}{b}self,",
        f"{b}{b}transformer: torch.nn.Module,",
        f"{b}{b}tp_mesh: Any,",
        f"{b}) -> tuple[torch.nn.Module, list[dict[str, Any]]]:",
        f"{b}{b}tp_size = tp_mesh.size()",
        f"{b}{b}layer_plans: list[dict[str, Any]] = []",
    ]
    for head, group in groups.items():
        if head:
            lines.append(f"{2 * b}for block in {module_expr('transformer', head)}:")
            lines.extend(_group_lines(group, "block", 3 * b, width, norm_class, out))
        else:
            lines.extend(_group_lines(group, "transformer", 2 * b, width, norm_class, out))
    lines.append(f"{2 * b}return transformer, layer_plans")
    out.code = "\n".join(lines) + "\n"
    if any(g.conditional or g.norms for g in groups.values()):
        out.helpers.append(HAS_SUBMODULE_HELPER)
    if any(g.rearrange for g in groups.values()):
        out.helpers.append(REGROUP_HELPER)
    if any(g.norms for g in groups.values()) and norm_class == "_DistributedRMSNorm":
        out.helpers.append(DISTRIBUTED_RMSNORM)
    out.uses_replicate = any("replicate" in style for style in tp.layers.values())
    return out


def _group_lines(
    group: _ListPlan, var: str, ind: str, width: int, norm_class: str, out: TpCode
) -> list[str]:
    lines: list[str] = []
    for module_path, attr in group.attrs:
        # a module whose layers all exist only in some blocks (`None` elsewhere) is guarded too
        under = [p for p in group.layers if p.startswith(module_path + ".")]
        guarded = bool(module_path) and bool(under) and all(p in group.conditional for p in under)
        if guarded:
            lines.append(f"{ind}if _has_submodule({var}, {quote(module_path)}):")
        lines.extend(
            call(
                "shard_div_attr",
                [module_expr(var, module_path), quote(attr), "tp_size"],
                indent=ind + INDENT if guarded else ind,
                width=width,
            )
        )
    for path, kind, reason, segments in group.rearrange:
        # only the kinds the plan accepts (`plan._rearrangement_generated`) reach this point
        lines.extend(comment(reason or kind, indent=ind, width=width, tag=f"CDIT({kind}): "))
        target = module_expr(var, path)
        if kind == "fused_out_down":
            widths = "[" + ", ".join(f"{module_expr(var, s)}.out_features" for s in segments) + "]"
            lines.extend(
                call("_regroup", [target, widths, "tp_size", "dim=1"], indent=ind, width=width)
            )
        else:  # packed_gated
            widths = f"[{target}.out_features // 2] * 2"
            lines.extend(
                call("_regroup", [target, widths, "tp_size", "dim=0"], indent=ind, width=width)
            )
        out.applied.append(f"{kind} on {path}: {reason}")
    static = {p: s for p, s in group.layers.items() if p not in group.conditional}
    if static:
        lines.append(f"{ind}layer_plan = {{")
        for path, style in sorted(static.items()):
            lines.append(f"{ind}{INDENT}{quote(path)}: {STYLE_CODE[style]},")
        lines.append(f"{ind}}}")
    else:
        lines.append(f"{ind}layer_plan: dict[str, Any] = {{}}")  # filled below
    for path, condition in group.conditional.items():
        style = group.layers[path]
        if condition:
            lines.extend(comment(f"exists when {condition}", indent=ind, width=width))
        lines.append(f"{ind}if _has_submodule({var}, {quote(path)}):")
        lines.append(f"{ind}{INDENT}layer_plan[{quote(path)}] = {STYLE_CODE[style]}")
    lines.extend(
        call(
            "parallelize_module",
            [f"module={var}", "device_mesh=tp_mesh", "parallelize_plan=layer_plan"],
            indent=ind,
            width=width,
        )
    )
    for path in group.norms:
        parent_path, _, attr = path.rpartition(".")
        parent = module_expr(var, parent_path)
        lines.append(f"{ind}if _has_submodule({var}, {quote(path)}):")
        lines.extend(
            call(
                norm_class,
                ["tp_mesh", f"{parent}.{attr}"],
                indent=ind + INDENT,
                width=width,
                prefix=f"{parent}.{attr} = ",
            )
        )
    lines.append(f"{ind}layer_plans.append(layer_plan)")
    return lines


def _groups(plan: IntegrationPlan) -> dict[str, _ListPlan]:
    """The TP plan by block list (`""`: modules outside the lists), lists in execution order."""
    tp = plan.tensor_parallel
    groups: dict[str, _ListPlan] = defaultdict(_ListPlan)
    for attr in (b.attr for b in plan.cache.block_lists):  # lists in execution order first
        if any(k.startswith(f"{attr}.*.") for k in tp.layers):
            groups[attr] = _ListPlan()
    for key, style in sorted(tp.layers.items()):
        head, path = _split_key(key)
        groups[head].layers[path] = style
        if key in tp.conditional_layers:
            groups[head].conditional[path] = tp.conditional_layers[key]
    for key in sorted(set(tp.shard_div_attrs)):
        head, path = _split_key(key)
        module_path, _, attr = path.rpartition(".")
        groups[head].attrs.append((module_path, attr))
    for item in sorted(tp.weight_rearrangement, key=lambda r: (r.layer, r.kind)):
        head, path = _split_key(item.layer)
        segments = tuple(_split_key(seg)[1] for seg in item.segments)
        groups[head].rearrange.append((path, item.kind, item.reason, segments))
    for key in sorted(set(tp.distributed_norms)):
        head, path = _split_key(key)
        groups[head].norms.append(path)

    return groups
