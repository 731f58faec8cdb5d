"""Generated regions inside existing files: find, insert next to related code, replace (libcst).

A region is one statement or one collection element the generator owns in a file it does not
own (cache-dit's `adapters.py`, `__init__.py` exports, planner activations, the CLI example
registry). Regions are located by name, so the generator can tell what is already there:

* `def` - a top-level function or class (`<slug>_adapter`), inserted after the last top-level
  definition decorated like `anchor.decorator` (`BlockAdapterRegister.register`);
* `assign` - a top-level `name = ...` (an export line), inserted after the last assignment whose
  value calls `anchor.call` with a first argument starting with `anchor.first_arg`;
* `function_assign` - the same inside the body of top-level function `container`
  (`_activate_cp_planners`);
* `dict_entry` / `list_entry` - a string-keyed entry of the top-level dict / list `container`
  (`_env_path_mapping`, `__all__`), appended with the layout of the existing entries.

Unrelated nodes are never rebuilt, so libcst writes every other byte back unchanged. Imports a
region needs are added through libcst's `AddImportsVisitor` (a no-op when already imported).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

RegionKind = Literal["def", "assign", "function_assign", "dict_entry", "list_entry"]


class RegionError(ValueError):
    """The file does not have the structure a region is inserted into."""


@dataclass(frozen=True)
class Anchor:
    decorator: str | None = None  # dotted callee of a decorator
    call: str | None = None  # callee of an assigned value
    first_arg: str | None = None  # prefix of that call's first string argument


@dataclass(frozen=True)
class ImportNeed:
    module: str
    obj: str | None = None
    relative: int = 0


@dataclass(frozen=True)
class Region:
    id: str
    kind: RegionKind
    name: str
    code: str  # the generated statement / `key: value` / element, in the file's style
    container: str | None = None
    anchor: Anchor = Anchor()
    imports: tuple[ImportNeed, ...] = ()


def region_code(module: cst.Module, region: Region) -> str | None:
    """The current text of `region` in `module`, or None when it is not there."""
    if region.kind in ("def", "assign", "function_assign"):
        found = _find_statement(module, region)
        if found is None:
            return None
        return module.code_for_node(found.with_changes(leading_lines=()))
    element = _find_element(module, region)
    if element is None:
        return None
    return module.code_for_node(_bare(element))


def normalized(code: str) -> str:
    """Region text compared without surrounding blank lines (statements end with one newline)."""
    stripped = code.strip("\n")
    return stripped + "\n" if "\n" in stripped or code.endswith("\n") else stripped


def put_region(module: cst.Module, region: Region) -> cst.Module:
    """Insert `region` (or replace its current version) and return the new module."""
    if region.kind in ("def", "assign", "function_assign"):
        return _put_statement(module, region)
    return _put_element(module, region)


def add_imports(
    module: cst.Module, needs: Sequence[ImportNeed], full_module_name: str | None
) -> cst.Module:
    """Add the imports in `needs` that the module does not have yet (libcst's own handling)."""
    package = full_module_name.rsplit(".", 1)[0] if full_module_name else None
    present = _top_level_imports(module, package or "")
    needs = [
        n for n in needs if (_absolute(n.module, n.relative, package or ""), n.obj) not in present
    ]
    if not needs:
        return module
    context = CodemodContext(full_module_name=full_module_name, full_package_name=package)
    for need in needs:
        AddImportsVisitor.add_needed_import(context, need.module, need.obj, relative=need.relative)
    return AddImportsVisitor(context).transform_module(module)


def _absolute(module: str, relative: int, package: str) -> str:
    if not relative:
        return module
    parts = package.split(".") if package else []
    base = parts[: len(parts) - (relative - 1)] if relative > 1 else parts
    return ".".join([*base, module] if module else base)


def _top_level_imports(module: cst.Module, package: str) -> set[tuple[str, str | None]]:
    """(absolute module, imported name or None) of the module's top-level imports."""
    found: set[tuple[str, str | None]] = set()
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    if alias.asname is None:
                        found.add((module.code_for_node(alias.name), None))
            elif isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                name = module.code_for_node(small.module) if small.module else ""
                absolute = _absolute(name, len(small.relative), package)
                for alias in small.names:
                    if alias.asname is None:
                        found.add((absolute, module.code_for_node(alias.name)))
    return found


# ----------------------------------------------------------------------------- statements


def _body_of(module: cst.Module, region: Region) -> tuple[list[cst.BaseStatement], int | None]:
    """The statement list holding the region and, for `function_assign`, the function index."""
    if region.kind != "function_assign":
        return list(module.body), None
    for index, stmt in enumerate(module.body):
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == region.container:
            if not isinstance(stmt.body, cst.IndentedBlock):
                break
            return list(stmt.body.body), index
    raise RegionError(f"function `{region.container}` was not found")


def _find_statement(module: cst.Module, region: Region) -> cst.BaseStatement | None:
    body, _ = _body_of(module, region)
    for stmt in body:
        if _defines(stmt, region):
            return stmt
    return None


def _defines(stmt: cst.BaseStatement, region: Region) -> bool:
    if region.kind == "def":
        return isinstance(stmt, cst.FunctionDef | cst.ClassDef) and stmt.name.value == region.name
    return region.name in _assigned_names(stmt)


def _assigned_names(stmt: cst.BaseStatement) -> list[str]:
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return []
    small = stmt.body[0]
    if isinstance(small, cst.Assign):
        return [t.target.value for t in small.targets if isinstance(t.target, cst.Name)]
    if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
        return [small.target.value]
    return []


def _put_statement(module: cst.Module, region: Region) -> cst.Module:
    body, func_index = _body_of(module, region)
    new = cst.parse_statement(region.code, config=module.config_for_parsing)
    for index, stmt in enumerate(body):
        if _defines(stmt, region):
            body[index] = new.with_changes(leading_lines=stmt.leading_lines)
            return _with_body(module, body, func_index)
    position = _anchor_position(body, region)
    if region.kind == "def":
        blank = cst.EmptyLine(indent=False)
        new = new.with_changes(leading_lines=[blank, blank] if position > 0 else [])
        if position < len(body) and not body[position].leading_lines:
            body[position] = body[position].with_changes(leading_lines=[blank, blank])
    body.insert(position, new)
    return _with_body(module, body, func_index)


def _with_body(
    module: cst.Module, body: list[cst.BaseStatement], func_index: int | None
) -> cst.Module:
    if func_index is None:
        return module.with_changes(body=body)
    func = module.body[func_index]
    assert isinstance(func, cst.FunctionDef) and isinstance(func.body, cst.IndentedBlock)
    outer = list(module.body)
    outer[func_index] = func.with_changes(body=func.body.with_changes(body=body))
    return module.with_changes(body=outer)


def _anchor_position(body: list[cst.BaseStatement], region: Region) -> int:
    """Index after the last statement related to the region (end of the body if none)."""
    anchor = region.anchor
    last = None
    fallback = None
    for index, stmt in enumerate(body):
        if (
            anchor.decorator
            and isinstance(stmt, cst.FunctionDef | cst.ClassDef)
            and any(_dotted(_callee(d.decorator)) == anchor.decorator for d in stmt.decorators)
        ):
            last = index
        if anchor.call:
            call = _assigned_call(stmt)
            if call is not None and _dotted(call.func) == anchor.call:
                fallback = index
                first = _first_string(call)
                if anchor.first_arg is None or (first or "").startswith(anchor.first_arg):
                    last = index
    chosen = last if last is not None else fallback
    return len(body) if chosen is None else chosen + 1


def _assigned_call(stmt: cst.BaseStatement) -> cst.Call | None:
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    value = small.value if isinstance(small, cst.Assign | cst.AnnAssign) else None
    return value if isinstance(value, cst.Call) else None


def _callee(node: cst.BaseExpression) -> cst.BaseExpression:
    return node.func if isinstance(node, cst.Call) else node


def _dotted(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr.value}" if head else None
    return None


def _first_string(call: cst.Call) -> str | None:
    if not call.args:
        return None
    return _string_value(call.args[0].value)


def _string_value(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString):
        try:
            value = ast.literal_eval(node.value)
        except (ValueError, SyntaxError):
            return None
        return value if isinstance(value, str) else None
    return None


# ----------------------------------------------------------------------------- elements


def _collection(module: cst.Module, region: Region) -> tuple[int, cst.Dict | cst.List | cst.Tuple]:
    for index, stmt in enumerate(module.body):
        if region.container in _assigned_names(stmt):
            assert isinstance(stmt, cst.SimpleStatementLine)
            small = stmt.body[0]
            assert isinstance(small, cst.Assign | cst.AnnAssign)
            value = small.value
            wanted = cst.Dict if region.kind == "dict_entry" else (cst.List, cst.Tuple)
            if isinstance(value, wanted):
                return index, value  # type: ignore[return-value]
            raise RegionError(f"`{region.container}` is not a literal {region.kind[:-6]}")
    raise RegionError(f"`{region.container}` was not found at the top of the file")


def _element_key(element: cst.BaseElement | cst.BaseDictElement) -> str | None:
    if isinstance(element, cst.DictElement):
        return _string_value(element.key)
    if isinstance(element, cst.Element):
        return _string_value(element.value)
    return None


def _find_element(module: cst.Module, region: Region) -> cst.DictElement | cst.Element | None:
    _, collection = _collection(module, region)
    for element in collection.elements:
        if _element_key(element) == region.name:
            assert isinstance(element, cst.DictElement | cst.Element)
            return element
    return None


def _bare(element: cst.CSTNode) -> cst.CSTNode:
    return element.with_changes(comma=cst.MaybeSentinel.DEFAULT)


def _parse_element(region: Region, module: cst.Module) -> cst.DictElement | cst.Element:
    source = "{" + region.code + "}" if region.kind == "dict_entry" else "[" + region.code + "]"
    expr = cst.parse_expression(source, config=module.config_for_parsing)
    assert isinstance(expr, cst.Dict | cst.List)
    element = expr.elements[0]
    assert isinstance(element, cst.DictElement | cst.Element)
    return element


def _first_gap(collection: cst.Dict | cst.List | cst.Tuple) -> cst.BaseParenthesizableWhitespace:
    """The whitespace before the first element (a newline + indent in multi-line literals)."""
    opening = collection.lbrace if isinstance(collection, cst.Dict) else None
    if isinstance(collection, cst.List):
        opening = collection.lbracket
    gap = opening.whitespace_after if opening is not None else None
    if isinstance(gap, cst.ParenthesizedWhitespace):
        return gap
    return cst.SimpleWhitespace(" ")


def _put_element(module: cst.Module, region: Region) -> cst.Module:
    index, collection = _collection(module, region)
    new = _parse_element(region, module)
    elements = list(collection.elements)
    for i, element in enumerate(elements):
        if _element_key(element) == region.name:
            elements[i] = new.with_changes(comma=element.comma)
            break
    else:
        if elements:
            last = elements[-1]
            previous = elements[-2].comma if len(elements) > 1 else None
            separator = (
                previous
                if isinstance(previous, cst.Comma)
                else cst.Comma(whitespace_after=_first_gap(collection))
            )
            trailing = (
                last.comma if isinstance(last.comma, cst.Comma) else cst.MaybeSentinel.DEFAULT
            )
            new = new.with_changes(comma=trailing)
            elements[-1] = last.with_changes(comma=separator)
        elements.append(new)
    stmt = module.body[index]
    assert isinstance(stmt, cst.SimpleStatementLine)
    small = stmt.body[0]
    assert isinstance(small, cst.Assign | cst.AnnAssign)
    new_small = small.with_changes(value=collection.with_changes(elements=elements))
    body = list(module.body)
    body[index] = stmt.with_changes(body=[new_small])
    return module.with_changes(body=body)
