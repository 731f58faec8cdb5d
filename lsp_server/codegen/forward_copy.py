"""Copy a transformer's `forward` out of its source with the PatchFunctor fixes applied (libcst).

Under caching cache-dit swaps each cached block list for a one-element list and re-calls blocks
positionally (facts §1.4, §1.9). Given the analysis reasons (kind + source line), the copy gets:

* `block_list_access`: `self.<list>[k]` / `len(self.<list>)` read the real blocks from
  `self._cdit_blocks["<list>"]` (the functor stores them before caching swaps the list);
* `keyword_binding`: the block call passes the block's leading parameters positionally, so the
  positional re-call binds them to the same parameters;
* `loop_invariant`: statements at the top of the loop body move in front of the loop, when no
  statement of that loop depends on the block index;
* `loop_index_dependent`: the loop over that list becomes per-block steps (`block_steps`): each
  block's forward runs the loop body with its own index;
* `interleaved_lists`: lists run by one `zip` loop: the loop becomes per-block steps of the first
  list, each also running block k of the others;
* anything else (`stream_order`, fixes that do not apply): the statement stays where it is, under
  a `# CDIT-REVIEW(<kind>)` comment, and the PatchFunctor is refused (`render_functor`).

Every change is marked with a `# CDIT:` comment. The result is a module-level function named
`_patched_forward` (same signature and decorators) plus the import lines its free names need,
resolved against the source module (relative imports made absolute).
"""

from __future__ import annotations

import ast
import builtins
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from .block_steps import BLOCKS_ATTR, StepError, Steps, transform
from .plan import BlockListPlan, FunctorReason

PATCHED_NAME = "_patched_forward"
_COMMENT_WIDTH = 72
_TWO_STREAM = {"Pattern_0", "Pattern_1", "Pattern_2"}
# reasons whose list's loop becomes per-block steps (index-dependent work, zipped lists)
_STEP_KINDS = ("loop_index_dependent", "interleaved_lists")


class ForwardCopyError(Exception):
    """The forward could not be located or copied; the functor stays a skeleton."""


@dataclass
class PatchedForward:
    code: str  # module-level `def _patched_forward(...)`, 4-space indentation
    imports: list[str]  # import statements its free names need
    applied: list[str] = field(default_factory=list)  # one line per automatic change
    review: list[str] = field(default_factory=list)  # one line per item left for review
    block_refs: list[str] = field(default_factory=list)  # lists to keep in `_cdit_blocks`
    steps: list[Steps] = field(default_factory=list)  # lists whose loop became per-block steps
    source_line: int = 0


def copy_forward(
    source: str,
    class_name: str,
    module_name: str,
    reasons: Sequence[FunctorReason],
    block_lists: Sequence[BlockListPlan],
    block_params: dict[str, list[str]] | None = None,
) -> PatchedForward:
    """The patched copy of `class_name.forward` from `source` (text of module `module_name`)."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise ForwardCopyError(f"the transformer source does not parse: {exc}") from exc
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    cls = next(
        (s for s in module.body if isinstance(s, cst.ClassDef) and s.name.value == class_name),
        None,
    )
    if cls is None:
        raise ForwardCopyError(f"class {class_name} is not defined at the top of the source")
    forward = next(
        (s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "forward"),
        None,
    )
    if forward is None:
        raise ForwardCopyError(f"{class_name} does not define `forward` itself (inherited?)")
    positions = wrapper.resolve(PositionProvider)

    lists = {b.attr: b for b in block_lists}
    index_dependent = {r.block_list for r in reasons if r.kind in _STEP_KINDS and r.block_list}
    # the loops of these lists become per-block steps (block_steps): their body stays as written
    reasons = [
        r
        for r in reasons
        if r.block_list not in index_dependent
        or r.kind not in (*_STEP_KINDS, "loop_invariant", "keyword_binding")
    ]
    fixes = _Fixes(
        access={r.line for r in reasons if r.kind == "block_list_access"},
        keyword={r.line: r for r in reasons if r.kind == "keyword_binding"},
        hoist={
            r.line
            for r in reasons
            if r.kind == "loop_invariant" and r.block_list not in index_dependent
        },
        review={},
    )
    for r in reasons:
        if r.kind == "loop_invariant" and r.block_list in index_dependent:
            fixes.review.setdefault(r.line, []).append(
                (r.kind, f"{r.message} (not hoisted: this loop also has index-dependent work)")
            )
        elif r.kind not in ("block_list_access", "keyword_binding", "loop_invariant"):
            fixes.review.setdefault(r.line, []).append((r.kind, r.message))

    rewriter = _ForwardRewriter(
        positions=positions,
        lists=lists,
        fixes=fixes,
        block_params=block_params or {},
        class_name=class_name,
    )
    new_forward = forward.visit(rewriter)
    assert isinstance(new_forward, cst.FunctionDef)
    new_forward = _with_docstring(
        new_forward.with_changes(name=cst.Name(PATCHED_NAME), leading_lines=()),
        '"""Patched copy of the transformer\'s forward (changes marked `CDIT`)."""',
    )
    # libcst renders a nested node relative to its own indentation (string contents excepted)
    code = module.code_for_node(new_forward).lstrip("\n")
    steps: list[Steps] = []
    review = list(rewriter.review)
    for attr in sorted(index_dependent):
        plan = lists.get(attr)
        count = 2 if plan is not None and plan.forward_pattern in _TWO_STREAM else 1
        try:
            step = transform(
                code, attr, (block_params or {}).get(attr, []), count, frozenset(lists)
            )
        except (StepError, SyntaxError) as exc:
            review.append(f"`{attr}` has index-dependent loop work that cannot be moved: {exc}")
            continue
        code = step.code
        steps.append(step)
    functions = "\n\n".join(s.function for s in steps)

    result = PatchedForward(
        code=code,
        imports=_imports_for(code + "\n" + functions, source, module_name, class_name),
        applied=rewriter.applied
        + [f"`{s.name[1:-5]}`: index-dependent loop work moved into {s.name}" for s in steps],
        review=review,
        block_refs=sorted(rewriter.block_refs.union(*(s.block_refs for s in steps))),
        steps=steps,
        source_line=positions[forward].start.line,
    )
    for line in sorted(set(fixes.review) - rewriter.review_done):
        for kind, message in fixes.review[line]:
            result.review.append(f"line {line} {kind}: {message} (statement not located)")
    for line in sorted(set(fixes.keyword) - rewriter.keyword_done):
        reason = fixes.keyword[line]
        result.review.append(f"line {line} keyword_binding: {reason.message} (not rewritten)")
    return result


@dataclass
class _Fixes:
    access: set[int]
    keyword: dict[int, FunctorReason]
    hoist: set[int]
    review: dict[int, list[tuple[str, str]]]


class _ForwardRewriter(cst.CSTTransformer):
    def __init__(
        self,
        *,
        positions: dict[cst.CSTNode, object],
        lists: dict[str, BlockListPlan],
        fixes: _Fixes,
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
        return self._leave(original_node, updated_node)

    def visit_Try(self, node: cst.Try) -> bool:
        self._enter(node)
        return True

    def leave_Try(self, original_node, updated_node):  # type: ignore[no-untyped-def]
        return self._leave(original_node, updated_node)

    def visit_For(self, node: cst.For) -> bool:
        self._enter(node)
        return True

    def leave_For(self, original_node: cst.For, updated_node: cst.For):  # type: ignore[no-untyped-def]
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
        count = 2 if plan.forward_pattern in _TWO_STREAM else 1
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


def _with_docstring(func: cst.FunctionDef, docstring: str) -> cst.FunctionDef:
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


# ----------------------------------------------------------------------------- free names


def _imports_for(code: str, source: str, module_name: str, class_name: str) -> list[str]:
    """Import lines for the names `code` reads that the source module defines or imports."""
    func = ast.parse(code).body[0]
    free = _free_names(func)
    module = ast.parse(source)
    package = module_name.rsplit(".", 1)[0] if "." in module_name else ""
    lines: set[str] = set()
    for name in sorted(free):
        lines.add(_import_line(name, module, module_name, package))
    return sorted(lines, key=lambda s: (not s.startswith("import "), s))


def _names_read(func: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _free_names(func: ast.FunctionDef | ast.AsyncFunctionDef | ast.stmt) -> set[str]:
    assert isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef)
    local: set[str] = set()
    args = func.args
    for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
        local.add(a.arg)
    for a in (args.vararg, args.kwarg):
        if a is not None:
            local.add(a.arg)
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            local.add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                local.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node is not func:
                local.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            local.add(node.name)
        elif isinstance(node, ast.arg) and node is not None:
            local.add(node.arg)
    return _names_read(func) - local - set(dir(builtins))


def _import_line(name: str, module: ast.Module, module_name: str, package: str) -> str:
    for stmt in _top_level(module.body):
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                bound = alias.asname or alias.name.split(".")[0]
                if bound == name:
                    if alias.asname:
                        return f"import {alias.name} as {alias.asname}"
                    return f"import {alias.name.split('.')[0]}"
        elif isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if (alias.asname or alias.name) == name:
                    source = _absolute(stmt.module, stmt.level, package)
                    bound = f" as {alias.asname}" if alias.asname else ""
                    return f"from {source} import {alias.name}{bound}"
    return f"from {module_name} import {name}"


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for stmt in body:
        out.append(stmt)
        if isinstance(stmt, ast.If):
            out.extend(_top_level(stmt.body))
            out.extend(_top_level(stmt.orelse))
        elif isinstance(stmt, ast.Try):
            out.extend(_top_level(stmt.body))
    return out


def _absolute(module: str | None, level: int, package: str) -> str:
    if level == 0:
        return module or ""
    parts = package.split(".") if package else []
    base = parts[: len(parts) - (level - 1)] if level > 1 else parts
    return ".".join([*base, module] if module else base)


def block_forward_params(path: str, class_name: str, line: int | None = None) -> list[str] | None:
    """Positional parameter names (after self) of `class_name.forward` defined in `path`."""
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and (
            node.name == class_name or (line is not None and node.lineno == line)
        ):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    names = [a.arg for a in [*item.args.posonlyargs, *item.args.args]]
                    return names[1:]
            return None
    return None
