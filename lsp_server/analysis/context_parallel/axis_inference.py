"""The sequence axis of the tensors a position module returns, read from how they are built."""

from __future__ import annotations

import ast
from collections.abc import Mapping

from ..astutil import (
    callee_name,
    positional_params,
    self_attr,
    short_text,
    walk,
    walk_local,
)
from .axis_syntax import (
    POINTWISE,
    after_new_axis,
    cat_dim,
    int_arg,
    is_frequency_fn,
    is_full_slice,
    is_minus_one,
    is_shape_read,
    keeps_leading,
    kept_axes,
    length_slice_axis,
    no_leading_axes,
    tiles_a_vector,
    tuple_index,
)
from .rank_inference import ExactRanks


def return_axes(
    func: ast.FunctionDef,
    owner: ast.ClassDef | None,
    depth: int = 0,
    positions: frozenset[str] = frozenset(),
    functions: Mapping[str, ast.stmt] | None = None,
) -> list[tuple[int | None, str]]:
    """(sequence axis, how it was read) of each value the function returns. `positions`: the
    parameters every caller hands a 1-D position vector (`torch.arange(n)`). `functions`: the
    module-level definitions of the file, read through when the function calls one."""
    axes = _Axes(func, owner, depth, positions, functions=functions)
    for node in walk_local(func):
        if isinstance(node, ast.Return) and node.value is not None:
            elts = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            return [axes.axis(e, 0) for e in elts]
    return []


def name_axis(
    func: ast.FunctionDef,
    owner: ast.ClassDef | None,
    name: str,
    *,
    joins: bool = False,
    modules: Mapping[str, tuple[int | None, ...]] | None = None,
    functions: Mapping[str, ast.stmt] | None = None,
) -> tuple[int | None, str]:
    """(sequence axis, how it was read) of the local `name` of `func`, read from how it is built.
    `joins`: the stream it goes with is itself a join of sequences (`x = cat([ctx, x], 1)`), so
    tables joined along their sequence axis (`cat([text_rows, rows])`) keep it. `modules`: the
    sequence axis of each output of the position modules `func` calls (`self.rope(h, w)`); then
    a name rebound from itself (`cos = cat([text_rows, cos])`) is read as each binding sees it.
    `functions`: the module-level definitions of the file (`cos, sin = _rope(n, d)`)."""
    axes = _Axes(func, owner, 0, joins=joins, modules=modules, functions=functions)
    return axes.axis(ast.Name(name, ast.Load()), 0)


_ID_VECTORS = ("tensor", "as_tensor", "clone", "long", "int", "to")


def _is_torch(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "torch"


class _Axes:
    """Follows a returned tensor back to where its sequence axis is made: a slice to a length
    (`t[:n]`, `t[:, :n]`), `arange(n)` (axis 0), `outer(positions, freqs)` (the positions' axis);
    through element-wise ops, `cat` along another axis, local (also tuple-unpacked) assignments and
    helper methods of the same class."""

    def __init__(
        self,
        func: ast.FunctionDef,
        owner: ast.ClassDef | None,
        depth: int,
        positions: frozenset[str] = frozenset(),
        *,
        joins: bool = False,
        modules: Mapping[str, tuple[int | None, ...]] | None = None,
        functions: Mapping[str, ast.stmt] | None = None,
    ) -> None:
        self.owner = owner
        self.functions = functions or {}
        self.depth = depth
        self.positions = positions
        self.joins = joins
        self.modules = modules
        # every binding of a name, by line (read one by one with `modules`), and the line read
        self.bindings: dict[str, list[tuple[int, ast.expr, int | None]]] = {}
        self.assigns: dict[str, tuple[ast.expr, int | None]] = {}
        self.at: int | None = None
        # lengths: forward parameters and locals read from a shape (`n = x.shape[1]`, `len(x)`)
        self.params = set(positional_params(func)) | {a.arg for a in func.args.kwonlyargs}
        self.lengths = set(self.params)
        # list name -> the values appended to it (`freqs.append(freq)`)
        self.appends: dict[str, list[ast.expr]] = {}
        # lists filled with `.extend(...)` (per-token position lists built in Python)
        self.extended = {
            node.func.value.id
            for node in walk_local(func)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "extend"
            and isinstance(node.func.value, ast.Name)
        }
        for node in walk_local(func):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "append"
                and isinstance(node.func.value, ast.Name)
                and len(node.args) == 1
            ):
                self.appends.setdefault(node.func.value.id, []).append(node.args[0])
        nodes = sorted(
            (n for n in walk_local(func) if isinstance(n, ast.Assign)), key=lambda n: n.lineno
        )
        for node in nodes:
            for target in node.targets:
                elts = [target] if isinstance(target, ast.Name) else None
                if isinstance(target, ast.Tuple):
                    elts = list(target.elts)
                for i, elt in enumerate(elts or []):
                    if isinstance(elt, ast.Name):
                        index = None if isinstance(target, ast.Name) else i
                        self.bindings.setdefault(elt.id, []).append(
                            (node.lineno, node.value, index)
                        )
        # the first binding of each name (read without `modules`)
        self.assigns = {name: (b[0][1], b[0][2]) for name, b in self.bindings.items()}
        for name, (value, index) in list(self.assigns.items()):
            if index is None and is_shape_read(value):
                self.lengths.add(name)
        self.ranks = ExactRanks(self.assigns, owner, lambda e: self._is_positions(e, 0))

    def axis(
        self, expr: ast.expr, depth: int, element: int | None = None
    ) -> tuple[int | None, str]:
        none: tuple[int | None, str] = (None, "")
        if depth > 12:
            return none
        if isinstance(expr, ast.Tuple) and element is not None and element < len(expr.elts):
            return self.axis(expr.elts[element], depth + 1)
        if isinstance(expr, ast.Subscript):
            return self._subscript_axis(expr, depth, element)
        if isinstance(expr, ast.BinOp) and isinstance(
            expr.op, ast.Mult | ast.Add | ast.Sub | ast.Div
        ):  # `positions[:, None] * self.freqs`: the other side adds no leading axis
            for side, other in ((expr.left, expr.right), (expr.right, expr.left)):
                if (
                    no_leading_axes(other)
                    or self._unit_expanded_no_wider(other, side)
                    or self._no_wider(other, side)
                ):
                    found, how = self.axis(side, depth + 1, element)
                    if found is not None:
                        return found, how
            return none
        if isinstance(expr, ast.Name) and self.modules is not None and expr.id in self.bindings:
            return self._binding_axis(expr.id, depth, element)
        if isinstance(expr, ast.Name) and expr.id in self.assigns:
            value, index = self.assigns[expr.id]
            return self.axis(value, depth + 1, index)
        if isinstance(expr, ast.Name) and expr.id in self.appends:
            values = self.appends[expr.id]
            if element is not None and element < len(values):  # `freqs[i]` of appended values
                return self.axis(values[element], depth + 1)
            return none
        if not isinstance(expr, ast.Call):
            return none
        return self._call_axis(expr, depth, element)

    def _binding_axis(self, name: str, depth: int, element: int | None) -> tuple[int | None, str]:
        """The binding of `name` the line being read sees (the last one when reading from
        outside), read at its own line."""
        seen = [b for b in self.bindings[name] if self.at is None or b[0] < self.at]
        if not seen:
            return None, ""
        line, value, index = seen[-1]
        saved, self.at = self.at, line
        try:
            return self.axis(value, depth + 1, index if index is not None else element)
        finally:
            self.at = saved

    def _subscript_axis(
        self, expr: ast.Subscript, depth: int, element: int | None
    ) -> tuple[int | None, str]:
        """A subscript: an element of a tuple-valued result, rows picked by positions or ids, a
        slice to a length, or new unit axes around the value's own."""
        none: tuple[int | None, str] = (None, "")
        picked = tuple_index(expr)
        if picked is not None and element is None:
            return self.axis(expr.value, depth + 1, picked)  # `f[0]` of a `(cos, sin)`
        if element is not None:
            return none
        if not isinstance(expr.slice, ast.Tuple | ast.Slice) and any(
            isinstance(n, ast.Call) and callee_name(n) == "arange" for n in walk(expr.slice)
        ):  # `table[offset + arange(n)]`: rows picked by a position vector
            return 0, f"rows picked by positions (`{short_text(expr)}`)"
        if self._is_token_ids(expr.slice, depth + 1):  # `table[ids[:, k]]`
            return 0, f"rows gathered by per-token ids (`{short_text(expr)}`)"
        if self._is_caller_positions(expr.slice, depth + 1):  # `table[pos]`, pos = arange(n)
            return 0, f"rows picked by the positions the caller builds (`{short_text(expr)}`)"
        found = length_slice_axis(expr.slice)
        if found is not None:
            return found, f"sliced to a length on axis {found} (`{short_text(expr)}`)"
        kept = kept_axes(expr.slice)  # `ys[:, None]`: new unit axes around the old ones
        if kept is not None:
            inner, how = self.axis(expr.value, depth + 1)
            if inner is not None and inner < len(kept):
                return kept[inner], how
        return none

    def _call_axis(self, expr: ast.Call, depth: int, element: int | None) -> tuple[int | None, str]:
        """A call: a factory sized by a length, frequencies of positions, `arange`, `outer`,
        `cat`, a helper method of the class, or an element-wise op."""
        none: tuple[int | None, str] = (None, "")
        name = callee_name(expr)
        sized = self._length_axis(expr, name)
        if sized is not None:
            return sized, f"`{short_text(expr)}` has a sequence length on axis {sized}"
        if is_frequency_fn(name) and any(
            self._is_positions(a, depth + 1)
            for a in [*expr.args, *(k.value for k in expr.keywords)]
        ):
            return 0, f"`{name}` of a flattened position vector (positions on axis 0)"
        if name in _COUNTS and element is None:
            return 0, f"built by `{name}` over a length"
        if element is None and self._is_positions(expr, depth + 1):
            return 0, f"a flattened position vector (`{short_text(expr)}`)"
        if name == "outer" and len(expr.args) == 2:
            for i, arg in enumerate(expr.args):
                if self._from_arange(arg, depth + 1):
                    return i, f"`outer` of positions (`arange`) on axis {i}"
            return none
        if name in ("cat", "concat") and expr.args:
            return self._cat_axis(expr, depth)
        if name == "stack" and expr.args and element is None:
            return self._stack_axis(expr, depth)
        if name == "unsqueeze" and element is None and isinstance(expr.func, ast.Attribute):
            inner, how = self.axis(expr.func.value, depth + 1)
            dim = self._from_front(int_arg(expr, 0, "dim"), expr.func.value)
            moved = after_new_axis(inner, dim)
            if inner is not None and moved is None:
                how = f"{how}, then `{short_text(expr)}` adds an axis where the rank decides"
            return moved, how
        if name in ("view", "reshape") and element is None and keeps_leading(expr):
            inner, how = self.axis(expr.func.value, depth + 1)  # type: ignore[union-attr]
            return (0, how) if inner == 0 else none
        method = self_attr(expr.func)
        if method and self.modules is not None and method in self.modules:
            outputs = self.modules[method]
            index = element or 0
            if index < len(outputs) and outputs[index] is not None:
                return outputs[index], f"output {index} of `self.{method}(...)`"
            return none
        if method and self.owner is not None and self.depth < 2:
            return self._helper_axis(method, element)
        if isinstance(expr.func, ast.Name) and self.depth < 2:
            helper = self.functions.get(expr.func.id)
            if isinstance(helper, ast.FunctionDef):  # a function of the same file
                axes = return_axes(helper, None, self.depth + 1, functions=self.functions)
                index = element or 0
                if index < len(axes) and axes[index][0] is not None:
                    axis, how = axes[index]
                    return axis, f"{how}, in `{expr.func.id}`"
                return none
        if name in POINTWISE:
            if isinstance(expr.func, ast.Attribute) and not (
                isinstance(expr.func.value, ast.Name) and expr.func.value.id == "torch"
            ):
                return self.axis(expr.func.value, depth + 1, element)
            if expr.args:
                return self.axis(expr.args[0], depth + 1, element)
        return none

    def _cat_axis(self, expr: ast.Call, depth: int) -> tuple[int | None, str]:
        """`cat` of parts along another axis than their sequence axis keeps it."""
        first = expr.args[0]
        if isinstance(first, ast.ListComp):
            inner, how = self._comprehension_axis(first, depth + 1)
            if inner is not None and cat_dim(expr) != inner:
                return inner, how
        if isinstance(first, ast.List | ast.Tuple) and first.elts:
            inner, how = self.axis(first.elts[0], depth + 1)
            if inner is not None and cat_dim(expr) != inner:
                return inner, how
            # sequences joined along their axis, as the stream is: every part on that axis
            if (
                self.joins
                and inner is not None
                and len(first.elts) > 1
                and all(self.axis(e, depth + 1)[0] == inner for e in first.elts[1:])
            ):
                return inner, f"{how}; the parts joined along it as the stream is"
        if isinstance(first, ast.Name) and self.appends.get(first.id):
            inner, how = self.axis(self.appends[first.id][0], depth + 1)
            if inner is not None and cat_dim(expr) != inner:
                return inner, how
        return None, ""

    def _stack_axis(self, expr: ast.Call, depth: int) -> tuple[int | None, str]:
        """`stack([a, b], dim=d)`: the parts' axis, moved by the new one when it comes before."""
        first = expr.args[0]
        if not (isinstance(first, ast.List | ast.Tuple) and first.elts):
            return None, ""
        inner, how = self.axis(first.elts[0], depth + 1)
        given = len(expr.args) > 1 or any(k.arg in ("dim", "axis") for k in expr.keywords)
        dim = int_arg(expr, 1, "dim") if given else 0
        moved = after_new_axis(inner, self._from_front(dim, first.elts[0]))
        if inner is not None and moved is None:
            how = f"{how}, then `stack(..., dim={dim})` adds an axis where the rank decides"
        return moved, how

    def _unit_expanded_no_wider(self, other: ast.expr, side: ast.expr) -> bool:
        """`self.inv[None, :]` beside `pos[:, None]`: an attribute of `self` given unit axes,
        of no higher rank than the side: broadcasting adds no axis in front of the side's."""
        if not (isinstance(other, ast.Subscript) and self_attr(other.value) is not None):
            return False
        if kept_axes(other.slice) is None:
            return False
        parts = other.slice.elts if isinstance(other.slice, ast.Tuple) else [other.slice]
        side_rank = self.ranks.rank(side)
        return side_rank is not None and len(parts) <= side_rank

    def _no_wider(self, other: ast.expr, side: ast.expr) -> bool:
        """`ys[:, None] * freqs` with `freqs` 1-D: an operand of known rank no higher than the
        side's cannot put an axis in front of the side's (broadcasting aligns on the right)."""
        other_rank = self.ranks.rank(other)
        side_rank = self.ranks.rank(side)
        return other_rank is not None and side_rank is not None and other_rank <= side_rank

    def _from_front(self, dim: int | None, value: ast.expr) -> int | None:
        """A new axis at a negative `dim` (-1 excepted: appended), counted from the front where
        the exact rank of `value` is read (`unsqueeze(-4)` of a rank-4 tensor: 1)."""
        if dim is None or dim >= -1:
            return dim
        rank = self.ranks.rank(value)
        return rank + 1 + dim if rank is not None and rank + 1 + dim >= 0 else dim

    def _is_caller_positions(self, expr: ast.expr, depth: int) -> bool:
        """A parameter every caller hands a 1-D position vector, through local names and
        element-wise conversions (`pos.long()`)."""
        if depth > 12:
            return False
        if isinstance(expr, ast.Name) and expr.id in self.positions:
            return True
        if isinstance(expr, ast.Name) and expr.id in self.assigns:
            value, index = self.assigns[expr.id]
            return index is None and self._is_caller_positions(value, depth + 1)
        return (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Attribute)
            and expr.func.attr in POINTWISE + _ID_VECTORS
            and self._is_caller_positions(expr.func.value, depth + 1)
        )

    def _helper_axis(self, method: str, element: int | None) -> tuple[int | None, str]:
        """The axis a helper method of the same class returns."""
        assert self.owner is not None
        helper = next(
            (f for f in self.owner.body if isinstance(f, ast.FunctionDef) and f.name == method),
            None,
        )
        if helper is not None:
            axes = return_axes(helper, self.owner, self.depth + 1)
            index = element or 0
            return axes[index] if index < len(axes) else (None, "")
        return None, ""

    def _is_token_ids(self, expr: ast.expr, depth: int) -> bool:
        """One column of a per-token id table the caller passes (`ids[:, k]`, through local
        names): a 1-D vector with one entry per token, so rows picked by it follow the tokens."""
        if depth > 12:
            return False
        if isinstance(expr, ast.Name) and expr.id in self.extended:
            return True  # filled per token with `.extend(...)` (then made a tensor)
        if isinstance(expr, ast.Name) and expr.id in self.assigns:
            value, index = self.assigns[expr.id]
            return index is None and self._is_token_ids(value, depth + 1)
        if isinstance(expr, ast.Call) and callee_name(expr) in _ID_VECTORS:
            # `torch.tensor(frame_index, dtype=torch.long)` of a list forward fills per token,
            # `ids.clone()`, `ids.long()`
            inner = expr.args[0] if expr.args else None
            if isinstance(expr.func, ast.Attribute) and not _is_torch(expr.func.value):
                inner = expr.func.value
            return inner is not None and (
                self._is_token_ids(inner, depth + 1)
                or (isinstance(inner, ast.Name) and inner.id in self.extended)
            )
        return (
            isinstance(expr, ast.Subscript)
            and isinstance(expr.value, ast.Name)
            and expr.value.id in self.params
            and isinstance(expr.slice, ast.Tuple)
            and len(expr.slice.elts) == 2
            and is_full_slice(expr.slice.elts[0])
            and not isinstance(expr.slice.elts[1], ast.Slice)
        )

    def _comprehension_axis(self, comp: ast.ListComp, depth: int) -> tuple[int | None, str]:
        """`[f[0] for f in freqs]`: the element's axis, `f` standing for a value of `freqs`."""
        if len(comp.generators) != 1 or not isinstance(comp.generators[0].target, ast.Name):
            return None, ""
        gen = comp.generators[0]
        assert isinstance(gen.target, ast.Name)
        source = gen.iter
        values: list[ast.expr] = []
        if isinstance(source, ast.Name) and source.id in self.appends:
            values = self.appends[source.id]
        elif isinstance(source, ast.List | ast.Tuple):
            values = list(source.elts)
        if not values:
            return None, ""
        saved = self.assigns.get(gen.target.id)
        self.assigns[gen.target.id] = (values[0], None)
        try:
            return self.axis(comp.elt, depth + 1)
        finally:
            if saved is None:
                del self.assigns[gen.target.id]
            else:
                self.assigns[gen.target.id] = saved

    def _length_axis(self, call: ast.Call, name: str) -> int | None:
        """`zeros(1, n, d)`: the one axis whose size is a sequence length (a forward parameter or
        a length read from a shape); None when there is none or more than one."""
        if name not in _FACTORIES:
            return None
        sizes = list(call.args)
        if len(sizes) == 1 and isinstance(sizes[0], ast.Tuple | ast.List):
            sizes = list(sizes[0].elts)
        if name == "full" and len(call.args) >= 2 and not isinstance(call.args[0], ast.Tuple):
            return None  # `full(size, value)` with a size that is not spelled out
        hits = [
            i
            for i, size in enumerate(sizes)
            if isinstance(size, ast.Name) and size.id in self.lengths
        ]
        return hits[0] if len(hits) == 1 and len(sizes) > 1 else None

    def _is_positions(self, expr: ast.expr, depth: int) -> bool:
        """A 1-D vector of positions: `arange`, or a grid flattened (`g.reshape(-1)`,
        `g.flatten()`)."""
        if depth > 12:
            return False
        if self._is_caller_positions(expr, depth):
            return True
        if isinstance(expr, ast.Name) and expr.id in self.assigns:
            return self._is_positions(self.assigns[expr.id][0], depth + 1)
        if not isinstance(expr, ast.Call):
            return False
        if self._from_arange(expr, depth):
            return True
        if not isinstance(expr.func, ast.Attribute):
            return False
        if expr.func.attr == "flatten":
            return not expr.args
        if tiles_a_vector(expr):  # `arange(h).repeat_interleave(w)`: one entry per token
            return self._is_positions(expr.func.value, depth + 1)
        return (
            expr.func.attr in ("reshape", "view")
            and len(expr.args) == 1
            and is_minus_one(expr.args[0])
        )

    def _from_arange(self, expr: ast.expr, depth: int) -> bool:
        if depth > 12:
            return False
        if self._is_caller_positions(expr, depth):
            return True
        if isinstance(expr, ast.Name) and expr.id in self.assigns:
            return self._from_arange(self.assigns[expr.id][0], depth + 1)
        if isinstance(expr, ast.Call):
            if callee_name(expr) in _COUNTS:
                return True
            if isinstance(expr.func, ast.Attribute) and (
                expr.func.attr in POINTWISE or tiles_a_vector(expr)  # `arange(h).repeat(w)`
            ):
                return self._from_arange(expr.func.value, depth + 1)
        return False


_FACTORIES = ("zeros", "ones", "empty", "randn", "rand", "full")
_COUNTS = ("arange", "linspace")  # 1-D positions counted up to a length
