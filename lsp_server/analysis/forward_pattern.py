"""ForwardPattern inference from a block's `forward` parameters and the order of its returns.

cache-dit's own check only verifies parameter names; the return order (Pattern_0 vs Pattern_1) and
whether the transformer's call survives cache-dit's positional re-call are read here.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .astutil import positional_params, primary_source, self_attr, walk_local

HIDDEN = "hidden_states"
ENCODER = "encoder_hidden_states"

# cache-dit's UnifiedBlocks.forward signature per pattern: the streams bound before `*args`.
UNIFIED_PARAMS = {
    "Pattern_0": (HIDDEN, ENCODER),
    "Pattern_1": (HIDDEN, ENCODER),
    "Pattern_2": (HIDDEN, ENCODER),
    "Pattern_3": (HIDDEN,),
    "Pattern_4": (HIDDEN,),
    "Pattern_5": (HIDDEN,),
}


@dataclass
class ReturnShape:
    """What a block's forward returns, in terms of its own parameters."""

    streams: list[str | None]  # returned elements mapped to parameter names (None: unknown)
    literal: list[str | None]  # returned elements as written when they are plain names
    line: int
    via: str  # "names" | "dataflow" | "local-tuple"


@dataclass
class BlockSignature:
    class_name: str
    path: str
    line: int
    params: list[str]
    has_var_positional: bool
    has_var_keyword: bool
    kwonly: list[str]
    returns: list[ReturnShape] = field(default_factory=list)
    delegates_to: str | None = None  # `return self.block(...)`
    return_annotation: str | None = None

    @property
    def named(self) -> list[str]:
        """Every named parameter in declared order: the positional ones, then the keyword-only
        ones. Streams are read from this order; binding a call positionally uses `params`."""
        return [*self.params, *self.kwonly]

    @property
    def keyword_only_streams(self) -> bool:
        """The block takes its first stream only by keyword (`def forward(self, *, x, c)`)."""
        return not self.params and bool(self.kwonly)


def read_signature(func: ast.FunctionDef, class_name: str, path: str) -> BlockSignature:
    sig = BlockSignature(
        class_name=class_name,
        path=path,
        line=func.lineno,
        params=positional_params(func),
        has_var_positional=func.args.vararg is not None,
        has_var_keyword=func.args.kwarg is not None,
        kwonly=[a.arg for a in func.args.kwonlyargs],
        return_annotation=ast.unparse(func.returns) if func.returns is not None else None,
    )
    assignments = _assignments(func)
    for node in walk_local(func):
        if not isinstance(node, ast.Return) or node.value is None:
            continue
        value = node.value
        via = "names"
        if isinstance(value, ast.Call) and self_attr(value.func):
            sig.delegates_to = self_attr(value.func)
            continue
        if isinstance(value, ast.Name) and value.id not in sig.named:
            tuple_value = _local_tuple(assignments.get(value.id, []))
            if tuple_value is not None:
                value, via = tuple_value, "local-tuple"
        elements = list(value.elts) if isinstance(value, ast.Tuple | ast.List) else [value]
        streams: list[str | None] = []
        literal: list[str | None] = []
        for elt in elements:
            literal.append(elt.id if isinstance(elt, ast.Name) else None)
            if isinstance(elt, ast.Constant) and elt.value is None:
                streams.append(None)
                continue
            stream, how = _trace_to_param(elt, sig.named, assignments)
            if how == "dataflow":
                via = "dataflow"
            streams.append(stream)
        sig.returns.append(ReturnShape(streams, literal, node.lineno, via))
    return sig


def _assignments(func: ast.FunctionDef) -> dict[str, list[ast.expr]]:
    out: dict[str, list[ast.expr]] = {}
    for node in walk_local(func):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out.setdefault(target.id, []).append(node.value)
                elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    for t, v in zip(target.elts, node.value.elts, strict=False):
                        if isinstance(t, ast.Name):
                            out.setdefault(t.id, []).append(v)
        elif (
            isinstance(node, ast.AnnAssign | ast.AugAssign)
            and isinstance(node.target, ast.Name)
            and node.value is not None
        ):
            out.setdefault(node.target.id, []).append(
                node.value if isinstance(node, ast.AnnAssign) else node.target
            )
    return out


def _local_tuple(values: list[ast.expr]) -> ast.Tuple | None:
    for value in reversed(values):
        if isinstance(value, ast.Tuple):
            return value
    return None


def _trace_to_param(
    expr: ast.expr, params: list[str], assignments: dict[str, list[ast.expr]]
) -> tuple[str | None, str]:
    """Map a returned expression to the parameter it carries forward (residual stream)."""
    if isinstance(expr, ast.Name) and expr.id in params:
        return expr.id, "names"
    seen: set[str] = set()
    current: ast.expr | None = expr
    for _ in range(12):
        if current is None:
            return None, "dataflow"
        name = primary_source(current)
        if name is None or name in seen:
            return None, "dataflow"
        if name in params:
            return name, "dataflow"
        seen.add(name)
        values = assignments.get(name)
        current = values[0] if values else None
    return None, "dataflow"


@dataclass
class PatternChoice:
    pattern: str | None
    signature_pattern: str | None
    second_stream: str | None  # the block parameter cache-dit treats as `encoder_hidden_states`
    returns_two: bool
    reason: str
    confidence: float
    alternatives: list[str] = field(default_factory=list)
    ambiguous: bool = False


def signature_pattern(sig: BlockSignature) -> str | None:
    """The pattern the signature literally reads as (names and return order), or None."""
    names = set(sig.named)
    if HIDDEN not in names or not sig.returns:
        return None
    shapes = {tuple(r.literal) for r in sig.returns if any(r.literal)}
    if len(shapes) != 1:
        arities = {len(r.literal) for r in sig.returns}
        if arities == {1}:
            return "Pattern_2" if ENCODER in names else "Pattern_3"
        return None
    shape = next(iter(shapes))
    if ENCODER in names:
        if len(shape) == 1:
            return "Pattern_2"
        if shape == (HIDDEN, ENCODER):
            return "Pattern_0"
        if shape == (ENCODER, HIDDEN):
            return "Pattern_1"
        return None
    if len(shape) == 1:
        return "Pattern_3"
    if shape == (HIDDEN, ENCODER):
        return "Pattern_4"
    if shape == (ENCODER, HIDDEN):
        return "Pattern_5"
    return None


def choose_pattern(
    sig: BlockSignature,
    loop_targets: list[str | None] | None,
    call_stream_args: list[str | None] | None,
    loop_reads: set[str] | None = None,
) -> PatternChoice:
    """Recommend a ForwardPattern from what the block returns.

    `loop_targets` are the names the transformer assigns the block's result to, and
    `call_stream_args` the variables it passes as the block's positional parameters; both are used
    when the block's returns cannot be read. `loop_reads` (names read in the loop body) tells
    whether a second returned stream is carried into the next block (Pattern_0/1) or is only an
    output (Pattern_4/5).
    """
    literal = signature_pattern(sig)
    shapes = [r for r in sig.returns if r.streams]
    if not shapes and loop_targets:
        return pattern_from_loop_targets(sig, loop_targets, call_stream_args, literal)
    if not shapes:
        return PatternChoice(
            None, literal, None, False, "the block's forward has no readable return", 0.2
        )
    arities = {len(r.streams) for r in shapes}
    if len(arities) > 1 and loop_targets:
        # Returns of different arity (an optional extra output): keep the ones the loop unpacks.
        matching = [r for r in shapes if len(r.streams) == len(loop_targets)]
        if matching:
            shapes = matching
            arities = {len(loop_targets)}
    confidence = 0.95 if all(r.via == "names" for r in shapes) else 0.8
    if max(arities) >= 2:
        return _two_stream_choice(
            sig, shapes, loop_targets, call_stream_args, loop_reads, literal, confidence
        )
    return _one_stream_choice(sig, literal, confidence)


def _return_orders(shapes: list[ReturnShape], first: str | None) -> list[tuple[str, str | None]]:
    """For each return of two or more streams: "H" when the block's first parameter comes
    first, "E" when second ("?" when neither), with the other stream's parameter."""
    orders: list[tuple[str, str | None]] = []
    for r in shapes:
        if len(r.streams) < 2:
            continue
        a, b = r.streams[0], r.streams[1]
        if a == first or (a is None and b not in (first, None)):
            orders.append(("H", b if b != first else None))
        elif b == first or (b is None and a not in (first, None)):
            orders.append(("E", a))
        else:
            orders.append(("?", None))
    return orders


def _two_stream_choice(
    sig: BlockSignature,
    shapes: list[ReturnShape],
    loop_targets: list[str | None] | None,
    call_stream_args: list[str | None] | None,
    loop_reads: set[str] | None,
    literal: str | None,
    confidence: float,
) -> PatternChoice:
    """Pattern_0/1 (the second stream is carried to the next block) or Pattern_4/5 (only
    emitted), by the order of the returned streams."""
    first = sig.named[0] if sig.named else None
    orders = _return_orders(shapes, first)
    h_first = sum(1 for o in orders if o[0] == "H")
    e_first = sum(1 for o in orders if o[0] == "E")
    second = next((o[1] for o in orders if o[1]), None)
    if h_first == 0 and e_first == 0:
        if loop_targets:
            return pattern_from_loop_targets(sig, loop_targets, call_stream_args, literal)
        return PatternChoice(
            None,
            literal,
            None,
            True,
            "the block returns two values that do not map to its inputs",
            0.3,
            ambiguous=True,
        )
    ambiguous = h_first > 0 and e_first > 0
    if ambiguous:
        confidence = 0.5
    order_h_first = h_first >= e_first
    # Pattern_0/1 feed the returned second stream back into the next block; when the loop does
    # not carry it (it passes something else), the block only emits it: Pattern_4/5.
    takes_second = second is not None and second in sig.named
    if takes_second and loop_targets and len(loop_targets) >= 2 and loop_reads is not None:
        carried = loop_targets[1] if order_h_first else loop_targets[0]
        takes_second = carried is not None and carried in loop_reads
    if takes_second:
        pattern = "Pattern_0" if order_h_first else "Pattern_1"
        words = f"({first}, {second})" if order_h_first else f"({second}, {first})"
        reason = f"takes {first} and {second}, returns {words}"
    else:
        pattern = "Pattern_4" if order_h_first else "Pattern_5"
        words = (
            f"({first}, {second or 'new stream'})"
            if order_h_first
            else (f"({second or 'new stream'}, {first})")
        )
        reason = f"takes only {first} as a stream, returns {words}"
    if ambiguous:
        reason += "; return statements disagree on the order"
    return PatternChoice(
        pattern,
        literal,
        second if takes_second else None,
        True,
        reason,
        confidence,
        ambiguous=ambiguous,
    )


def _one_stream_choice(
    sig: BlockSignature, literal: str | None, confidence: float
) -> PatternChoice:
    """Pattern_2 (encoder_hidden_states is the 2nd positional parameter) or Pattern_3."""
    first = sig.named[0] if sig.named else None
    second = sig.named[1] if len(sig.named) > 1 else None
    if second == ENCODER:
        return PatternChoice(
            "Pattern_2",
            literal,
            second,
            False,
            f"takes {first} and {ENCODER}, returns only {first}",
            confidence,
            alternatives=["Pattern_3"],
        )
    extra = ""
    if ENCODER in sig.named:
        extra = f"; {ENCODER} is not its 2nd positional parameter, so it travels in **kwargs"
    return PatternChoice(
        "Pattern_3", literal, None, False, f"returns only {first}{extra}", confidence
    )


def pattern_from_loop_targets(
    sig: BlockSignature,
    targets: list[str | None],
    call_args: list[str | None] | None,
    literal: str | None,
) -> PatternChoice:
    """Fallback: read the order from `a, b = block(x, y, ...)` in the transformer."""
    first_var = call_args[0] if call_args else None
    if len(targets) >= 2 and first_var:
        if targets[0] == first_var:
            other = targets[1]
            pattern = "Pattern_0" if call_args and other in call_args else "Pattern_4"
        elif targets[1] == first_var:
            other = targets[0]
            pattern = "Pattern_1" if call_args and other in call_args else "Pattern_5"
        else:
            return PatternChoice(
                None, literal, None, True, "the loop assigns the block result to other names", 0.3
            )
        second = None
        if call_args and other in call_args:
            index = call_args.index(other)
            second = sig.named[index] if index < len(sig.named) else None
        return PatternChoice(
            pattern,
            literal,
            second,
            True,
            f"read from the loop assignment `{', '.join(map(str, targets))} = ...`",
            0.6,
        )
    if len(targets) == 1:
        second = sig.named[1] if len(sig.named) > 1 else None
        if second == ENCODER:
            return PatternChoice(
                "Pattern_2",
                literal,
                second,
                False,
                "read from the loop assignment (one returned stream)",
                0.6,
                alternatives=["Pattern_3"],
            )
        return PatternChoice(
            "Pattern_3",
            literal,
            None,
            False,
            "read from the loop assignment (one returned stream)",
            0.6,
        )
    return PatternChoice(None, literal, None, False, "the block's returns cannot be read", 0.2)
