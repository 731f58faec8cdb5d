"""Turn the analyzer's context-parallel plan (JSON) into the plan object cache-dit accepts.

The analyzer's `contextParallel.plan` maps a module key to either

* an input dict ``{name_or_output_index: {"split_dim", "expected_dims", "split_output", ...}}``
  (output indices are the strings ``"0"``, ``"1"``… with ``split_output`` true), or
* a gather ``{"gather_dim", "expected_dims", "outputs"}`` (``outputs`` > 1: the module returns a
  tuple and every element is gathered, but those listed in ``skip``: ``None`` there).

Module keys are dotted paths from the transformer (``""`` is the transformer itself); the symbolic
indices ``<list>.<last>`` (last block of a ModuleList) and ``<list>.<each>`` (every block, one key
per block) are resolved against the model. Extra keys such as ``reason`` and ``line`` are
documentation only and ignored.

`to_cache_dit_plan` returns the dict to pass as ``ParallelismConfig(cp_plan=...)``, built from
cache-dit's ``_ContextParallelInput`` / ``_ContextParallelOutput``. torch and cache-dit are imported
lazily inside the functions; importing this module does no work.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["EACH", "LAST", "expand_module_key", "to_cache_dit_plan"]

LAST = "<last>"
EACH = "<each>"

_DOC_KEYS = frozenset({"reason", "line"})


def to_cache_dit_plan(plan_json: Mapping[str, Any], transformer: torch.nn.Module) -> dict[str, Any]:
    """Convert an analyzer CP plan (``contextParallel.plan``) into a cache-dit ``cp_plan``.

    * output-index keys of ``split_output`` entries become ints;
    * ``<list>.<last>`` becomes ``<list>.<len(list) - 1>``, ``<list>.<each>`` one key per block;
    * a gather with ``outputs`` > 1 becomes a tuple of ``_ContextParallelOutput``;
    * several entries landing on one concrete key are merged (input dicts are united; a split and
      a gather on the same module become cache-dit's ``[inputs, output]`` sub-plan list).

    Raises ``ValueError`` for a module key that does not exist on ``transformer``, an input name
    that is not a parameter of that module's ``forward``, or a malformed entry.
    """
    from cache_dit.distributed.core import _ContextParallelInput, _ContextParallelOutput

    if "plan" in plan_json and "approach" in plan_json:  # the whole `contextParallel` object
        plan_json = plan_json["plan"]

    inputs: dict[str, dict[str | int, Any]] = {}
    outputs: dict[str, Any] = {}
    order: list[str] = []

    for key, spec in plan_json.items():
        if not isinstance(key, str):
            raise ValueError(f"CP plan: module key {key!r} is not a string")
        if not isinstance(spec, Mapping):
            raise ValueError(f"CP plan `{key}`: expected an object, got {type(spec).__name__}")
        for concrete, module in expand_module_key(transformer, key):
            if concrete not in order:
                order.append(concrete)
            if "gather_dim" in spec:
                if concrete in outputs:
                    raise ValueError(f"CP plan `{key}`: two gathers on module `{concrete}`")
                outputs[concrete] = _gather(key, spec, _ContextParallelOutput)
                continue
            merged = inputs.setdefault(concrete, {})
            for name, entry in _inputs(key, spec, module, _ContextParallelInput):
                if name in merged and merged[name] != entry:
                    raise ValueError(
                        f"CP plan `{key}`: conflicting splits of `{name}` on module `{concrete}`"
                    )
                merged[name] = entry

    plan: dict[str, Any] = {}
    for concrete in order:
        split = inputs.get(concrete)
        gather = outputs.get(concrete)
        if split and gather is not None:
            plan[concrete] = [split, gather]
        elif gather is not None:
            plan[concrete] = gather
        elif split:
            plan[concrete] = split
    return plan


def expand_module_key(
    transformer: torch.nn.Module, key: str
) -> Iterator[tuple[str, torch.nn.Module | list[torch.nn.Module]]]:
    """Yield ``(concrete_key, module)`` for one plan key, resolving ``<last>`` / ``<each>``.

    ``module`` is a list of modules when the key keeps cache-dit's own ``*`` wildcard. Raises
    ``ValueError`` when a path atom is not a submodule of the model.
    """
    import torch

    def walk(
        module: torch.nn.Module, done: list[str], rest: list[str]
    ) -> Iterator[tuple[list[str], torch.nn.Module | list[torch.nn.Module]]]:
        if not rest:
            yield done, module
            return
        atom, tail = rest[0], rest[1:]
        where = ".".join(done) or "<root>"
        if atom in (LAST, EACH, "*"):
            if not isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)):
                raise ValueError(
                    f"CP plan key `{key}`: `{atom}` needs a ModuleList, but `{where}` is "
                    f"{type(module).__name__}"
                )
            if len(module) == 0:
                raise ValueError(f"CP plan key `{key}`: `{where}` is an empty ModuleList")
            if atom == "*":
                if LAST in tail or EACH in tail or "*" in tail:
                    raise ValueError(
                        f"CP plan key `{key}`: `*` cannot be combined with `{LAST}`, `{EACH}` "
                        "or another `*`"
                    )
                leaves: list[torch.nn.Module] = []
                for block in module:
                    for _, found in walk(block, [], tail):
                        leaves.extend(found if isinstance(found, list) else [found])
                yield [*done, "*", *tail], leaves
                return
            indices = [len(module) - 1] if atom == LAST else list(range(len(module)))
            for index in indices:
                yield from walk(module[index], [*done, str(index)], tail)
            return
        child = _child(module, atom)
        if child is None:
            raise ValueError(
                f"CP plan key `{key}`: `{atom}` is not a submodule of `{where}` "
                f"({type(module).__name__})"
            )
        yield from walk(child, [*done, atom], tail)

    parts = key.split(".") if key else []
    if any(part == "" for part in parts):
        raise ValueError(f"CP plan key `{key}`: empty path component")
    for path, module in walk(transformer, [], parts):
        yield ".".join(path), module


def _child(module: torch.nn.Module, atom: str) -> torch.nn.Module | None:
    import torch

    if atom.isdigit() and isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)):
        index = int(atom)
        return module[index] if index < len(module) else None
    child = getattr(module, atom, None)
    return child if isinstance(child, torch.nn.Module) else None


def _gather(key: str, spec: Mapping[str, Any], output_cls: type) -> Any:
    gather_dim = _int(key, spec, "gather_dim")
    expected = _optional_int(key, spec, "expected_dims")
    count = spec.get("outputs", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"CP plan `{key}`: `outputs` must be a positive int, got {count!r}")
    one = output_cls(gather_dim=gather_dim, expected_dims=expected)
    skip = set(spec.get("skip", ()))
    return one if count == 1 else tuple(None if i in skip else one for i in range(count))


def _inputs(
    key: str,
    spec: Mapping[str, Any],
    module: torch.nn.Module | list[torch.nn.Module],
    input_cls: type,
) -> Iterator[tuple[str | int, Any]]:
    params = _forward_params(module)
    for name, entry in spec.items():
        if name in _DOC_KEYS:
            continue
        if isinstance(entry, list):
            converted: Any = [_input(key, name, item, input_cls) for item in entry]
            split_output = any(item.split_output for item in converted)
        elif isinstance(entry, Mapping):
            converted = _input(key, name, entry, input_cls)
            split_output = converted.split_output
        else:
            raise ValueError(f"CP plan `{key}`: entry `{name}` is not an object")
        if split_output:
            if not str(name).isdigit():
                raise ValueError(
                    f"CP plan `{key}`: split_output entry `{name}` must be an output index"
                )
            yield int(name), converted
            continue
        if str(name).isdigit():
            raise ValueError(
                f"CP plan `{key}`: `{name}` looks like an output index but split_output is false"
            )
        if params is not None and name not in params:
            raise ValueError(
                f"CP plan `{key}`: `{name}` is not a parameter of "
                f"{_module_name(module)}.forward {sorted(params)}"
            )
        yield str(name), converted


def _input(key: str, name: object, entry: Mapping[str, Any], input_cls: type) -> Any:
    if not isinstance(entry, Mapping):
        raise ValueError(f"CP plan `{key}`: entry `{name}` is not an object")
    where = f"{key}[{name}]"
    split_output = entry.get("split_output", False)
    if not isinstance(split_output, bool):
        raise ValueError(f"CP plan `{where}`: `split_output` must be a bool")
    return input_cls(
        split_dim=_int(where, entry, "split_dim"),
        expected_dims=_optional_int(where, entry, "expected_dims"),
        split_output=split_output,
    )


def _int(where: str, spec: Mapping[str, Any], field: str) -> int:
    value = spec.get(field)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"CP plan `{where}`: `{field}` must be an int, got {value!r}")
    return value


def _optional_int(where: str, spec: Mapping[str, Any], field: str) -> int | None:
    value = spec.get(field)
    if value is None:
        return None
    return _int(where, spec, field)


def _forward_params(module: torch.nn.Module | list[torch.nn.Module]) -> set[str] | None:
    """Parameter names of ``forward`` (as cache-dit reads them), or None when it takes **kwargs."""
    modules = module if isinstance(module, list) else [module]
    names: set[str] | None = None
    for current in modules:
        try:
            signature = inspect.signature(type(current).forward)
        except (TypeError, ValueError):
            return None
        params = list(signature.parameters.values())[1:]
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return None
        found = {p.name for p in params}
        names = found if names is None else names & found
    return names


def _module_name(module: torch.nn.Module | list[torch.nn.Module]) -> str:
    if isinstance(module, list):
        return type(module[0]).__name__ if module else "<empty>"
    return type(module).__name__
