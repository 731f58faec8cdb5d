"""Context parallelism over an input axis that is not the token sequence (`AxisSplit`).

The split is written here as hooks on the transformer, and `cp_plan` hands cache-dit an empty
hook plan (cache-dit still gives the attention its CP config; its root hook would also insist
on a tensor or tuple output, where diffusers and third-party models return dicts):

- before each call: the axis' size must divide by the CP size (under Ulysses Anything Attention,
  `ulysses_anything=True`, it need not: the first `size % world` ranks take one more entry, as
  `torch.tensor_split` shares, and the attention across ranks takes uneven lengths), the
  comparisons forward makes with that size must agree for the whole and every rank's size, the
  model's tensors added to the stream along that axis are swapped for this rank's rows, and the
  input is cut to this rank's share of the axis (shares in rank order, as cache-dit's own split),
  with the other inputs whose rows follow that axis (a timestep per frame) on theirs;
- after each call: the tensors are put back, the output's length on the gathered axis is checked
  (this rank's share) and the shares are gathered from every rank in rank order (padded to the
  largest share for the collective, the padding dropped).
"""

from __future__ import annotations

from .layout import INDENT, docstring
from .plan_model import AxisSplit

AXIS_SPLIT_FUNCTION = "_split_axis_hooks"

_BODY = """\
    import inspect
    import operator

    compare = {
        ">": operator.gt,
        ">=": operator.ge,
        "<": operator.lt,
        "<=": operator.le,
        "==": operator.eq,
        "!=": operator.ne,
    }
    names = list(inspect.signature(type(transformer).forward).parameters)[1:]
    spec = _AXIS_SPLIT
    param, axis, gather_axis = spec["param"], spec["axis"], spec["gather_axis"]
    whole: dict[str, torch.Tensor] = {}
    state: dict[str, int] = {}
    counts: list[int] = []  # every rank's share of the axis in this call

    def group_of() -> Any:
        config = getattr(transformer, "_cp_config", None)
        mesh = getattr(config, "_flattened_mesh", None)
        return None if mesh is None else mesh.get_group()

    def owner_of(path: str) -> tuple[torch.nn.Module, str]:
        parent, _, name = path.rpartition(".")
        return (transformer.get_submodule(parent) if parent else transformer), name

    def put(path: str, value: torch.Tensor) -> None:
        owner, name = owner_of(path)
        if name in owner._parameters:
            owner._parameters[name] = torch.nn.Parameter(value, requires_grad=False)
        elif name in owner._buffers:
            owner._buffers[name] = value
        else:
            setattr(owner, name, value)

    def restore() -> None:
        for path, table in whole.items():
            put(path, table)
        whole.clear()
        state.clear()
        counts.clear()

    def before(module: Any, args: tuple, kwargs: dict) -> Any:
        restore()
        group = group_of()
        index = names.index(param) if param in names else len(args)
        x = kwargs.get(param, args[index] if index < len(args) else None)
        if group is None or not isinstance(x, torch.Tensor):
            return None
        world = torch.distributed.get_world_size(group)
        rank = torch.distributed.get_rank(group)
        size = x.shape[axis]
        if world < 2:
            return None
        anything = bool(getattr(getattr(transformer, "_cp_config", None), "ulysses_anything", 0))
        if size % world and not anything:
            raise ValueError(
                f"context parallelism splits axis {axis} of `{param}` ({size}): the size must "
                f"divide by the {world} ranks (or run Ulysses Anything Attention: "
                "ulysses_anything=True)"
            )
        if size < world:
            raise ValueError(
                f"context parallelism splits axis {axis} of `{param}` ({size}) over {world} "
                "ranks: every rank needs one entry at least"
            )
        shares = [size // world + (r < size % world) for r in range(world)]
        local, start = shares[rank], sum(shares[:rank])
        for op, value in spec["guards"]:
            if any(compare[op](size, value) != compare[op](n, value) for n in set(shares)):
                raise ValueError(
                    f"forward compares the size of axis {axis} of `{param}` with {value} "
                    f"({op}): the whole {size} and a rank's share disagree; use fewer ranks"
                )
        for path, dim in spec["tables"]:
            owner, name = owner_of(path)
            table = getattr(owner, name)
            rows = table.shape[table.dim() + dim]
            if rows == 1:
                continue
            if rows != size:
                raise ValueError(
                    f"`{path}` has {rows} rows along axis {axis} of `{param}`, not {size}"
                )
            whole[path] = table
            put(path, table.narrow(table.dim() + dim, start, local).detach())
        state.update(world=world, local=local)
        counts[:] = shares
        args, kwargs = list(args), dict(kwargs)
        for name, dim in ((param, axis), *spec["inputs"]):
            at = names.index(name) if name in names else len(args)
            value = kwargs.get(name, args[at] if at < len(args) else None)
            if not isinstance(value, torch.Tensor):
                continue
            if value.dim() <= dim or value.shape[dim] != size:
                raise ValueError(
                    f"`{name}` is split with `{param}` on its axis {dim}, which must hold the "
                    f"{size} entries of axis {axis} of `{param}`; its shape is "
                    f"{tuple(value.shape)}"
                )
            if name in kwargs:
                kwargs[name] = value.narrow(dim, start, local)
            else:
                args[at] = value.narrow(dim, start, local)
        return tuple(args), kwargs

    def after(module: Any, args: tuple, kwargs: dict, output: Any) -> Any:
        world, local = state.get("world", 1), state.get("local", 0)
        shares = list(counts)
        restore()
        if world < 2:
            return None
        key = next(iter(output)) if isinstance(output, dict) else 0  # diffusers' outputs too
        first = output if isinstance(output, torch.Tensor) else output[key]
        if first.shape[gather_axis] != local:
            raise ValueError(
                f"the output has {first.shape[gather_axis]} entries on axis {gather_axis}, "
                f"not this rank's {local} of `{param}`: it is not gathered there"
            )
        group = group_of()
        padded = first
        if local < shares[0]:  # uneven shares: the collective takes equal sizes
            pad = list(first.shape)
            pad[gather_axis] = shares[0] - local
            padded = torch.cat([first, first.new_zeros(pad)], dim=gather_axis)
        parts = [torch.empty_like(padded) for _ in range(world)]
        torch.distributed.all_gather(parts, padded.contiguous(), group=group)
        gathered = torch.cat(
            [p.narrow(gather_axis, 0, n) for p, n in zip(parts, shares, strict=True)],
            dim=gather_axis,
        )
        if isinstance(output, torch.Tensor):
            return gathered
        if isinstance(output, tuple):
            return (gathered, *output[1:])
        if isinstance(output, list):
            return [gathered, *output[1:]]
        output[key] = gathered
        return output

    if not getattr(transformer, "_cdit_axis_split", False):
        transformer.register_forward_pre_hook(before, with_kwargs=True)
        transformer.register_forward_hook(after, with_kwargs=True)
        transformer._cdit_axis_split = True
"""


def axis_split_code(split: AxisSplit, width: int) -> str:
    """`_AXIS_SPLIT` and the function installing the hooks (`AXIS_SPLIT_FUNCTION`)."""
    b = INDENT
    tables = "".join(f"({path!r}, {dim}), " for path, dim in split.tables)
    guards = "".join(f"({op!r}, {value}), " for op, value in split.guards)
    doc = (
        f"Context parallelism over axis {split.axis} of `{split.param}`, split here (not by "
        f"cache-dit): attention of {', '.join(f'`{n}`' for n in split.routed)} runs across "
        "ranks, of "
        f"{', '.join(f'`{n}`' for n in split.local)} stays local. Checks the size divides "
        "(under `ParallelismConfig(ulysses_anything=True)` it need not: the first ranks take "
        "one more entry) and the size comparisons forward makes agree, hands the model's "
        "tables along that axis this rank's rows, cuts the input to this rank's share and "
        f"gathers the output on its axis {split.gather_axis}."
    )
    inputs = "".join(f"({name!r}, {dim}), " for name, dim in split.inputs)
    lines = [
        "_AXIS_SPLIT: dict[str, Any] = {",
        f"{b}'param': {split.param!r},",
        f"{b}'axis': {split.axis},",
        f"{b}'gather_axis': {split.gather_axis},",
        f"{b}'tables': ({tables.rstrip()}),  # (attribute, its axis from the end)",
        f"{b}'guards': ({guards.rstrip()}),  # (comparison, literal)",
        f"{b}'inputs': ({inputs.rstrip()}),  # (other input split with it, its axis)",
        "}",
        "",
        "",
        f"def {AXIS_SPLIT_FUNCTION}(transformer: torch.nn.Module) -> None:",
        *docstring(doc, indent=b, width=width),
    ]
    return "\n".join(lines) + "\n" + _BODY
