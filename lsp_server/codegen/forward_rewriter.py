"""The libcst rewriter that applies the PatchFunctor fixes to a copy of `forward`.

`forward_copy.copy_forward` decides the fixes from the analysis reasons (`Fixes`, by statement
line) and runs `ForwardRewriter` over the transformer's `forward`: real-block reads for
`block_list_access`, positional leading parameters for `keyword_binding`, hoisting for
`loop_invariant`, and `# CDIT-REVIEW(<kind>)` comments for what stays to review. Every change
is marked with a `# CDIT:` comment.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

import libcst as cst

from .block_steps import BLOCKS_ATTR
from .plan import BlockListPlan, FunctorReason

_COMMENT_WIDTH = 72
# forward patterns whose blocks take two streams (hidden states and encoder hidden states)
TWO_STREAM = {"Pattern_0", "Pattern_1", "Pattern_2"}


@dataclass
class Fixes:
    """The fixes to make, by source line of the statement they apply to."""

    access: set[int]
    keyword: dict[int, FunctorReason]
    hoist: set[int]
    review: dict[int, list[tuple[str, str]]]
    bound: dict[int, FunctorReason] = field(default_factory=dict)  # `range(<count>)` loops


class ForwardRewriter(cst.CSTTransformer):
    """Applies `Fixes` to `forward` (a copy): each change marked `# CDIT:`, each item left for
    review under a `# CDIT-REVIEW(<kind>)` comment; `applied` / `review` say what was done."""

    def __init__(
        self,
        *,
        positions: dict[cst.CSTNode, object],
        lists: dict[str, BlockListPlan],
        fixes: Fixes,
        block_params: dict[str, list[str]],
        class_name: str,
    ) -> None:
        super().__init__()
        self.positions = positions
        self.lists = lists
        self.fixes = fixes
        self.block_params = block_params
        self.class_name = class_name
        self.stack: list[int] = []  # start lines of the enclosing statements, innermost last
        self.applied: list[str] = []
        self.review: list[str] = []
        self.block_refs: set[str] = set()
        self.keyword_done: set[int] = set()
        self.bound_done: set[int] = set()
        self.review_done: set[int] = set()
        self._comment: dict[int, list[str]] = {}  # statement line -> comment lines to add

    # -- statement bookkeeping ----------------------------------------------------------------
    def _line(self, node: cst.CSTNode) -> int:
        pos = self.positions.get(node)
        return pos.start.line if pos is not None else -1  # type: ignore[attr-defined]

    def _enter(self, node: cst.CSTNode) -> None:
        line = self._line(node)
        self.stack.append(line)
        if line in self.fixes.review:
            self.review_done.add(line)
        for kind, message in self.fixes.review.get(line, []):
            self._comment.setdefault(line, []).extend(
                _wrap(f"CDIT-REVIEW({kind}): {message}", prefix="# ")
            )
            self.review.append(f"line {line} {kind}: {message}")

    def _leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
        line = self.stack.pop()
        extra = self._comment.pop(line, None)
        if extra and hasattr(updated, "leading_lines"):
            comments = [cst.EmptyLine(comment=cst.Comment(text)) for text in extra]
            updated = updated.with_changes(leading_lines=[*updated.leading_lines, *comments])
        return updated

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        self._enter(node)
        return True

    def leave_SimpleStatementLine(self, original_node, updated_node):  # type: ignore[no-untyped-def]
        return self._leave(original_node, updated_node)

    def visit_If(self, node: cst.If) -> bool:
        self._enter(node)
        return True

    def leave_If(self, original_node, updated_node):  # type: ignore[no-untyped-def]
        return self._leave(original_node, updated_node)

    def visit_With(self, node: cst.With) -> bool:
        self._enter(node)
        return True

    def leave_With(self, original_node, updated_node):  # type: ignore[no-untyped-def]
        return self._leave(original_node, updated_node)

    def visit_While(self, node: cst.While) -> bool:
        self._enter(node)
        return True

    def leave_While(self, original_node, updated_node):  # type: ignore[no-untyped-def]
        return self._leave(original_node, self._counter_bound(updated_node))

    def visit_Try(self, node: cst.Try) -> bool:
        self._enter(node)
        return True

    def leave_Try(self, original_node, updated_node):  # type: ignore[no-untyped-def]
        return self._leave(original_node, updated_node)

    def visit_For(self, node: cst.For) -> bool:
        self._enter(node)
        return True

    def leave_For(self, original_node: cst.For, updated_node: cst.For):  # type: ignore[no-untyped-def]
        updated_node = self._list_length_bound(updated_node)
        attr = self._block_list_of(updated_node.iter)
        if attr is not None and self._innermost() in self.fixes.access:
            self._note_access(attr)  # a loop that reads the blocks without running them
            updated_node = updated_node.with_changes(iter=self._real_blocks(attr))
        updated = self._leave(original_node, updated_node)
        assert isinstance(updated, cst.For)
        body = updated.body
        if not isinstance(body, cst.IndentedBlock):
            return updated
        original_body = original_node.body
        assert isinstance(original_body, cst.IndentedBlock)
        hoisted: list[cst.BaseStatement] = []
        for original_stmt, stmt in zip(original_body.body, body.body, strict=True):
            if self._line(original_stmt) not in self.fixes.hoist:
                break
            hoisted.append(stmt)
        if not hoisted:
            return updated
        lines = [self._line(s) for s in original_body.body[: len(hoisted)]]
        self.applied.append(
            "line(s) " + ", ".join(map(str, lines)) + " loop_invariant: moved in front of the loop"
        )
        first = hoisted[0]
        note = cst.EmptyLine(
            comment=cst.Comment("# CDIT: hoisted out of the block loop (loop-invariant)")
        )
        hoisted[0] = first.with_changes(leading_lines=[*first.leading_lines, note])
        rest = list(body.body[len(hoisted) :])
        if not rest:
            rest = [cst.SimpleStatementLine([cst.Pass()])]
        loop = updated.with_changes(body=body.with_changes(body=rest))
        return cst.FlattenSentinel([*hoisted, loop])

    def _list_length_bound(self, loop: cst.For) -> cst.For:
        """`for i in range(self.depth)` -> `for i in range(len(self.blocks))` (`loop_bound`)."""
        it = loop.iter
        if not (isinstance(it, cst.Call) and len(it.args) == 1):
            return loop
        count = self._bound_length()
        if count is None:
            return loop
        return loop.with_changes(iter=it.with_changes(args=[it.args[0].with_changes(value=count)]))

    def _counter_bound(self, loop: cst.While) -> cst.While:
        """`while i < self.depth` -> `while i < len(self.blocks)` (`loop_bound` of a counter
        loop: the analysis proved `i` runs from 0 by 1 like `range`)."""
        test = loop.test
        if not (
            isinstance(test, cst.Comparison)
            and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.LessThan)
        ):
            return loop
        count = self._bound_length()
        if count is None:
            return loop
        target = test.comparisons[0].with_changes(comparator=count)
        return loop.with_changes(test=test.with_changes(comparisons=[target]))

    def _bound_length(self) -> cst.BaseExpression | None:
        """`len(self.<list>)` for the loop at this line when the analysis gave it a
        `loop_bound` reason (the change noted and commented); None otherwise."""
        line = self._innermost()
        reason = self.fixes.bound.get(line)
        if reason is None or not reason.block_list:
            return None
        self.bound_done.add(line)
        self.applied.append(f"line {line} loop_bound: loops len(self.{reason.block_list}) times")
        self._comment.setdefault(line, []).append(
            "# CDIT: the list's length (under caching it holds one wrapper)"
        )
        return cst.parse_expression(f"len(self.{reason.block_list})")

    # -- expressions ----------------------------------------------------------------------------
    def _innermost(self) -> int:
        return self.stack[-1] if self.stack else -1

    def _block_list_of(self, node: cst.BaseExpression) -> str | None:
        if (
            isinstance(node, cst.Attribute)
            and isinstance(node.value, cst.Name)
            and node.value.value == "self"
            and node.attr.value in self.lists
        ):
            return node.attr.value
        return None

    def _real_blocks(self, attr: str) -> cst.BaseExpression:
        self.block_refs.add(attr)
        return cst.parse_expression(f'self.{BLOCKS_ATTR}["{attr}"]')

    def leave_Subscript(self, original_node: cst.Subscript, updated_node: cst.Subscript):  # type: ignore[no-untyped-def]
        attr = self._block_list_of(updated_node.value)
        if attr is None or self._innermost() not in self.fixes.access:
            return updated_node
        self._note_access(attr)
        return updated_node.with_changes(value=self._real_blocks(attr))

    def leave_CompFor(self, original_node: cst.CompFor, updated_node: cst.CompFor):  # type: ignore[no-untyped-def]
        attr = self._block_list_of(updated_node.iter)
        if attr is None or self._innermost() not in self.fixes.access:
            return updated_node
        self._note_access(attr)
        return updated_node.with_changes(iter=self._real_blocks(attr))

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call):  # type: ignore[no-untyped-def]
        line = self._innermost()
        func = updated_node.func
        if (
            line in self.fixes.access
            and isinstance(func, cst.Name)
            and func.value == "len"
            and len(updated_node.args) == 1
        ):
            attr = self._block_list_of(updated_node.args[0].value)
            if attr is not None:
                self._note_access(attr)
                arg = updated_node.args[0].with_changes(value=self._real_blocks(attr))
                return updated_node.with_changes(args=[arg])
        if isinstance(func, cst.Name) and func.value == "super" and not updated_node.args:
            return updated_node.with_changes(
                args=[cst.Arg(cst.Name(self.class_name)), cst.Arg(cst.Name("self"))]
            )
        if line in self.fixes.keyword:
            return self._positional_call(line, updated_node)
        return updated_node

    def _note_access(self, attr: str) -> None:
        line = self._innermost()
        key = f"line {line} block_list_access: reads the real `{attr}` blocks"
        if key not in self.applied:
            self.applied.append(key)
            self._comment.setdefault(line, []).append(
                "# CDIT: real blocks (under caching the list holds one wrapper)"
            )

    def _positional_call(self, line: int, call: cst.Call) -> cst.Call:
        reason = self.fixes.keyword[line]
        plan = self.lists.get(reason.block_list or "")
        params = self.block_params.get(reason.block_list or "")
        if plan is None or not params:
            return call
        if any(a.keyword is None for a in call.args):
            return call  # already positional (or *args): nothing to move
        count = 2 if plan.forward_pattern in TWO_STREAM else 1
        leading = params[:count]
        by_name = {a.keyword.value: a for a in call.args if a.keyword is not None}
        if not all(name in by_name for name in leading):
            return call
        positional = [
            by_name[name].with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)
            for name in leading
        ]
        rest = [a for a in call.args if a.keyword is None or a.keyword.value not in leading]
        self.keyword_done.add(line)
        self.applied.append(
            f"line {line} keyword_binding: passes {', '.join(leading)} positionally"
        )
        self._comment.setdefault(line, []).append(
            "# CDIT: leading parameters positional (cache-dit re-calls so)"
        )
        return call.with_changes(args=[*positional, *rest])


def with_docstring(func: cst.FunctionDef, docstring: str) -> cst.FunctionDef:
    """Replace the function's docstring (the original one is long; the source is referenced)."""
    body = func.body
    if not isinstance(body, cst.IndentedBlock):
        return func
    statements = list(body.body)
    doc = cst.SimpleStatementLine([cst.Expr(cst.SimpleString(docstring))])
    first = statements[0] if statements else None
    if (
        isinstance(first, cst.SimpleStatementLine)
        and len(first.body) == 1
        and isinstance(first.body[0], cst.Expr)
        and isinstance(first.body[0].value, cst.SimpleString | cst.ConcatenatedString)
    ):
        statements[0] = doc.with_changes(leading_lines=first.leading_lines)
    else:
        statements.insert(0, doc)
    return func.with_changes(body=body.with_changes(body=statements))


def _wrap(text: str, prefix: str) -> list[str]:
    lines = textwrap.wrap(text, width=_COMMENT_WIDTH - len(prefix)) or [""]
    return [prefix + lines[0], *(prefix + "  " + line for line in lines[1:])]
