"""Infer `BlockAdapter.has_separate_cfg` from a pipeline's source (statically; never imported/run).

`has_separate_cfg` must be True exactly when the pipeline's default path calls the transformer
twice per denoising step (conditional and unconditional as separate calls), and False when it calls
it once (no CFG, guidance-distilled, or batched CFG: latents doubled, one call, prediction chunked).

How it decides, structurally (no tables of model or class names):

1. Pipeline classes are the classes defining `__call__` (directly or via a base class in the same
   file). Their denoiser is found from `__init__` / `register_modules` component names
   (`transformer*`, `unet*`, `prior*`, `model`, `denoiser*`, ...), else from the call whose result
   flows into `scheduler.step(...)`.
2. `__call__` is interpreted abstractly, statement by statement, with three-valued values:
   parameter defaults are known, except that an optional input defaulting to None is "unset"
   (`x is None` on it is unknown: users often pass it); `self._x = ...` assignments and
   single-`return` properties are evaluated; anything else is unknown. Helper methods and module
   functions of the same file are followed with their arguments bound, so aliases such as
   `current_model = self.transformer if ... else self.transformer_2` and helper loops are seen.
3. In the denoising loop (over timesteps / sigmas / a progress bar) denoiser calls are counted per
   iteration: a branch whose guard is False on the default path is skipped, a branch whose guard is
   unknown may run, if/else alternatives are alternatives, and a call inside an inner loop (guider
   batches) counts as several calls.
4. Two or more calls per step -> True, unless the first call already batches cond + uncond (its
   input doubled by `torch.cat([x] * 2)` / `x.repeat(2, ...)`); one call -> False; no denoising
   loop -> None.
"""

from __future__ import annotations

import ast
import builtins
import functools
import pathlib
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from .model import Evidence, SeparateCfg

__all__ = ["infer_separate_cfg"]

_CAP = 3  # call counts saturate here: "two or more" is all the decision needs
_MAX_DEPTH = 6  # nested helper calls followed
_MAX_SUBPIPE_DEPTH = 2  # composite pipelines delegating to sub-pipelines
_TEXT = 70  # max chars of source text quoted in evidence

# regex sources: compiled (and cached by `re`) on first use, not at import
_DENOISER_NAME = r"(transformer|unet|prior|denoiser|model|dit|mmdit|backbone)(_?\w*)?"
_NOT_DENOISER = (
    r"encoder|vae|tokeni|controlnet|control_net|processor|scheduler|guider|embed|adapter|proj"
    r"|feature|safety|vocoder|upsampl|connector|watermark|captioner|extractor"
)
_FORWARD = ("forward", "__call__")
_SELF_ATTR = r"\bself\.(\w+)"
_SELF_CALL = r"\bself\.(\w+)(?:\.forward|\.__call__)?\s*\("
_STEP_LOOP = r"timestep|sigma|progress_bar|tqdm|inference_steps|num_steps"
_GUIDANCE_LOOP = r"guid|cfg|cond|negative|_neg|neg_"


class _Unknown:
    """A value that cannot be known statically."""

    _inst: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._inst is None:
            cls._inst = super().__new__(cls)
        return cls._inst

    def __repr__(self) -> str:
        return "unknown"


class _Unset:
    """An optional `__call__` input defaulting to None: None by default, but users often pass it."""

    _inst: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._inst is None:
            cls._inst = super().__new__(cls)
        return cls._inst

    def __repr__(self) -> str:
        return "unset optional input"


UNKNOWN = _Unknown()
UNSET = _Unset()
_Value = object  # a Python constant, UNKNOWN or UNSET
_V = TypeVar("_V")


def _truth(v: _Value) -> bool | None:
    if v is UNKNOWN or v is UNSET:
        return None
    try:
        return bool(v)
    except Exception:
        return None


def _same(a: _Value, b: _Value) -> bool:
    return type(a) is type(b) and (a is b or a == b)


def _fmt(v: _Value) -> str:
    if v is UNSET:
        return "None (an optional input callers may pass: unknown)"
    return repr(v)


_PURE = (
    ast.BoolOp,
    ast.Compare,
    ast.UnaryOp,
    ast.BinOp,
    ast.IfExp,
    ast.Name,
    ast.Attribute,
    ast.Constant,
    ast.expr_context,
    ast.boolop,
    ast.cmpop,
    ast.unaryop,
    ast.operator,
)


def _is_pure(node: ast.AST) -> bool:
    """An expression made of names, constants and operators only (its value follows from them)."""
    return all(isinstance(n, _PURE) for n in ast.walk(node))


def _text(node: ast.AST) -> str:
    try:
        s = ast.unparse(node)
    except Exception:
        return "<expr>"
    s = " ".join(s.split())
    return s if len(s) <= _TEXT else s[: _TEXT - 3] + "..."


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _self_attr(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and _is_self(node.value):
        return node.attr
    return None


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _add(a: set[int], b: set[int]) -> set[int]:
    return {min(x + y, _CAP) for x in a for y in b}


# ------------------------------------------------------------------------------------------------
# Modules, classes and their members


@dataclass
class _Module:
    path: pathlib.Path
    lines: list[str]
    tree: ast.Module
    classes: dict[str, ast.ClassDef]
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
    rel_imports: dict[str, tuple[int, str, str]]  # local name -> (level, module, imported name)


_Func = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass
class _Member:
    mod: _Module
    fn: _Func
    owner: str
    closure: bool = False  # defined inside the walked function: sees its variables


def _build_module(path: pathlib.Path, text: str, tree: ast.Module) -> _Module:
    classes: dict[str, ast.ClassDef] = {}
    functions: dict[str, _Func] = {}
    rel: dict[str, tuple[int, str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[node.name] = node
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            for alias in node.names:
                rel[alias.asname or alias.name] = (node.level, node.module or "", alias.name)
    return _Module(path, text.splitlines(), tree, classes, functions, rel)


class _Loader:
    """Parses files on demand (the analyzed one from `source`, others lazily from disk)."""

    def __init__(self) -> None:
        self._cache: dict[pathlib.Path, _Module | None] = {}

    def add(self, path: pathlib.Path, text: str, tree: ast.Module) -> _Module:
        mod = _build_module(path, text, tree)
        self._cache[path] = mod
        return mod

    def load(self, path: pathlib.Path) -> _Module | None:
        if path in self._cache:
            return self._cache[path]
        mod: _Module | None = None
        try:
            text = path.read_text(encoding="utf-8")
            mod = _build_module(path, text, ast.parse(text, filename=str(path)))
        except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
            mod = None
        self._cache[path] = mod
        return mod

    def resolve_class(self, mod: _Module, name: str) -> tuple[_Module, ast.ClassDef] | None:
        """A class by local name: defined in `mod`, or imported into it with a relative import."""
        if name in mod.classes:
            return mod, mod.classes[name]
        imp = mod.rel_imports.get(name)
        if imp is None:
            return None
        level, module, orig = imp
        base = mod.path.parent
        for _ in range(level - 1):
            base = base.parent
        parts = [p for p in module.split(".") if p]
        target = base.joinpath(*parts)
        for cand in (target.with_suffix(".py"), target / "__init__.py"):
            if cand.is_file():
                other = self.load(cand)
                if other is not None and orig in other.classes:
                    return other, other.classes[orig]
        return None


_LEAVES = (
    ast.Name,
    ast.Constant,
    ast.expr_context,
    ast.operator,
    ast.cmpop,
    ast.boolop,
    ast.unaryop,
)


@functools.lru_cache(maxsize=1)
def _builtin_names() -> frozenset[str]:
    return frozenset(dir(builtins))


def _may_reach_denoiser(call: ast.Call) -> bool:
    """Calls worth following: `self.x(...)`, `x.forward(...)`, `name(...)` (not a builtin)."""
    f = call.func
    if isinstance(f, ast.Name):
        return f.id not in _builtin_names()
    if isinstance(f, ast.Attribute):
        return _is_self(f.value) or f.attr in _FORWARD
    return True


def _decorator_names(fn: _Func) -> set[str]:
    out = set()
    for d in fn.decorator_list:
        if isinstance(d, ast.Name):
            out.add(d.id)
        elif isinstance(d, ast.Attribute):
            out.add(d.attr)
    return out


def _base_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


class _ClassCtx:
    """A pipeline class with its same-file (optionally cross-file) bases flattened, first wins."""

    def __init__(self, loader: _Loader, mod: _Module, cls: ast.ClassDef, cross_file: bool) -> None:
        self.mod = mod
        self.cls = cls
        self.name = cls.name
        self.methods: dict[str, _Member] = {}
        self.properties: dict[str, _Member] = {}
        self.mro: list[tuple[_Module, ast.ClassDef]] = []
        seen: set[int] = set()
        queue: list[tuple[_Module, ast.ClassDef]] = [(mod, cls)]
        while queue and len(self.mro) < 16:
            m, c = queue.pop(0)
            if id(c) in seen:
                continue
            seen.add(id(c))
            self.mro.append((m, c))
            for b in c.bases:
                name = _base_name(b)
                if name is None:
                    continue
                found = (
                    loader.resolve_class(m, name)
                    if cross_file
                    else ((m, m.classes[name]) if name in m.classes else None)
                )
                if found is not None:
                    queue.append(found)
        for m, c in self.mro:
            for node in c.body:
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if node.name in self.methods or node.name in self.properties:
                    continue
                decos = _decorator_names(node)
                if "property" in decos or "cached_property" in decos:
                    self.properties[node.name] = _Member(m, node, c.name)
                elif "setter" not in decos:
                    self.methods[node.name] = _Member(m, node, c.name)
        self.components, self.subpipes = self._components()
        # self attributes read / called anywhere in the class (a cheap scan of the source text)
        self.read_attrs: set[str] = set()
        self.called_attrs: set[str] = set()
        for m, c in self.mro:
            segment = "\n".join(m.lines[c.lineno - 1 : c.end_lineno or c.lineno])
            self.read_attrs.update(re.findall(_SELF_ATTR, segment))
            self.called_attrs.update(re.findall(_SELF_CALL, segment))
        members = set(self.methods) | set(self.properties)
        self.read_attrs -= members
        self.called_attrs -= members
        # ids of "hot" nodes: ancestors of calls that may reach a denoiser (the walker skips others)
        self.hot: set[int] = set()
        self._indexed: set[int] = set()

    def index(self, root: ast.AST) -> None:
        if id(root) in self._indexed:
            return
        self._indexed.add(id(root))
        parents: dict[int, ast.AST] = {}
        calls: list[ast.Call] = []
        stack: list[ast.AST] = [root]
        while stack:
            node = stack.pop()
            for name in node._fields:
                value = getattr(node, name, None)
                if isinstance(value, list):
                    for item in value:
                        if isinstance(item, ast.AST) and not isinstance(item, _LEAVES):
                            parents[id(item)] = node
                            stack.append(item)
                elif isinstance(value, ast.AST) and not isinstance(value, _LEAVES):
                    parents[id(value)] = node
                    stack.append(value)
            if isinstance(node, ast.Call) and _may_reach_denoiser(node):
                calls.append(node)
        for call in calls:
            cur: ast.AST | None = call
            while cur is not None and id(cur) not in self.hot:
                self.hot.add(id(cur))
                cur = parents.get(id(cur))

    def _components(self) -> tuple[set[str], dict[str, tuple[_Module, str]]]:
        """`__init__` parameters / `register_modules` names, and `self.x = SomePipeline(...)`."""
        comps: set[str] = set()
        subpipes: dict[str, tuple[_Module, str]] = {}
        init = self.methods.get("__init__")
        if init is None:
            return comps, subpipes
        a = init.fn.args
        comps.update(p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs][1:])
        for node in ast.walk(init.fn):
            if not isinstance(node, (ast.Call, ast.Assign)):
                continue
            if isinstance(node, ast.Call):
                f = node.func
                if isinstance(f, ast.Attribute) and f.attr == "register_modules":
                    comps.update(k.arg for k in node.keywords if k.arg)
                continue
            if not isinstance(node.value, ast.Call):
                continue
            callee = _base_name(node.value.func)
            for t in node.targets:
                attr = _self_attr(t)
                if attr and callee and callee[:1].isupper():
                    subpipes[attr] = (init.mod, callee)
        return comps, subpipes

    def has_call(self) -> bool:
        return "__call__" in self.methods


# ------------------------------------------------------------------------------------------------
# Abstract environment


@dataclass(frozen=True, eq=False)
class _Def:
    """One assignment of a variable, with the definitions its right-hand side read (data flow)."""

    value: ast.AST
    line: int
    path: str
    deps: tuple[tuple[str, tuple[_Def, ...]], ...]


@dataclass
class _Env:
    vars: dict[str, _Value] = field(default_factory=dict)
    selfv: dict[str, _Value] = field(default_factory=dict)
    aliases: dict[str, frozenset[str]] = field(default_factory=dict)
    defs: dict[str, tuple[_Def, ...]] = field(default_factory=dict)
    origin: dict[str, tuple[str, int]] = field(default_factory=dict)

    def copy(self) -> _Env:
        return _Env(
            dict(self.vars),
            dict(self.selfv),
            dict(self.aliases),
            dict(self.defs),
            dict(self.origin),
        )

    def assign_from(self, other: _Env) -> None:
        self.vars, self.selfv, self.aliases = other.vars, other.selfv, other.aliases
        self.defs, self.origin = other.defs, other.origin


def _join_value(a: _Value, b: _Value) -> _Value:
    if _same(a, b):
        return a
    # "if x is None: x = 5.0" - the default path takes the filled-in value
    if a is UNSET and b is not UNKNOWN and b is not None:
        return b
    if b is UNSET and a is not UNKNOWN and a is not None:
        return a
    return UNKNOWN


def _join_map(a: dict[str, _V], b: dict[str, _V], join: Callable[[_V, _V], _V]) -> dict[str, _V]:
    out = dict(a)
    for k, v in b.items():
        out[k] = join(a[k], v) if k in a else v
    return out


def _join(envs: Sequence[_Env]) -> _Env:
    out = envs[0].copy()
    for e in envs[1:]:
        out.vars = _join_map(out.vars, e.vars, _join_value)
        out.selfv = _join_map(out.selfv, e.selfv, _join_value)
        out.aliases = _join_map(out.aliases, e.aliases, frozenset.union)
        out.defs = _join_map(out.defs, e.defs, lambda x, y: tuple(dict.fromkeys(x + y)))
        out.origin = _join_map(out.origin, e.origin, lambda x, _y: x)
    return out


def _const_default(node: ast.expr | None, unset_none: bool) -> _Value:
    if node is None:
        return UNKNOWN
    if isinstance(node, ast.Constant):
        if node.value is None:
            return UNSET if unset_none else None
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, (int, float))
    ):
        return -node.operand.value
    return UNKNOWN


_CMP = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.Is: lambda a, b: a is b,
    ast.IsNot: lambda a, b: a is not b,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_BIN = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}
_PURE_BUILTINS = {"float": float, "int": int, "bool": bool, "abs": abs, "min": min, "max": max}


# ------------------------------------------------------------------------------------------------
# The walker


@dataclass(frozen=True)
class _Guard:
    """A branch condition on the path to a call: `status` is its default-path truth."""

    test: ast.expr
    negated: bool
    status: str  # "true", "maybe" or "false"

    def text(self) -> str:
        return f"not ({_text(self.test)})" if self.negated else _text(self.test)


@dataclass
class _Site:
    """One denoiser call reached (or skipped) inside a denoising loop."""

    call: ast.Call
    stmt: ast.stmt | None
    scope: ast.AST
    path: str
    guards: tuple[_Guard, ...]
    context: str | None
    arg_defs: tuple[tuple[str, tuple[_Def, ...]], ...] = ()
    skipped_by: _Guard | None = None


@dataclass
class _Loop:
    node: ast.For | ast.AsyncFor | ast.While
    path: str
    where: str
    counts: set[tuple[int, bool]] = field(default_factory=set)
    sites: list[_Site] = field(default_factory=list)
    skipped: list[_Site] = field(default_factory=list)
    inner: list[Evidence] = field(default_factory=list)
    guard_notes: list[Evidence] = field(default_factory=list)

    @property
    def max_calls(self) -> int:
        return max((n for n, _ in self.counts), default=0)


class _Walker:
    def __init__(self, ctx: _ClassCtx, denoisers: set[str], relaxed: bool) -> None:
        self.ctx = ctx
        self.denoisers = denoisers
        self.relaxed = relaxed
        self.loops: list[_Loop] = []
        self.current: _Loop | None = None
        self.guards: list[_Guard] = []
        self.contexts: list[str] = []
        self.stack: list[int] = []
        self.mods: list[_Module] = [ctx.mod]
        self.scopes: list[ast.AST] = []
        self.stmt: ast.stmt | None = None
        self._prop_depth = 0
        self.local_funcs: dict[str, _Member] = {}

    # -- entry ----------------------------------------------------------------------------

    def run_call(self) -> None:
        member = self.ctx.methods["__call__"]
        env = _Env()
        self._bind_defaults(member, env, unset_none=True)
        self._enter(member, env)

    def _enter(self, member: _Member, env: _Env) -> set[int]:
        key = id(member.fn)
        if key in self.stack or len(self.stack) >= _MAX_DEPTH:
            return {0}
        self.stack.append(key)
        self.ctx.index(member.fn)
        self.mods.append(member.mod)
        self.scopes.append(member.fn)
        saved_stmt = self.stmt
        try:
            res = self._block(member.fn.body, env)
        finally:
            self.stack.pop()
            self.mods.pop()
            self.scopes.pop()
            self.stmt = saved_stmt
        return {n for n, _ in res}

    @property
    def path(self) -> str:
        return str(self.mods[-1].path)

    def _bind_defaults(self, member: _Member, env: _Env, unset_none: bool) -> list[str]:
        a = member.fn.args
        params = [p.arg for p in [*a.posonlyargs, *a.args]]
        if params and params[0] in ("self", "cls") and member.owner:
            params = params[1:]
        defaults = list(a.defaults)
        line = member.fn.lineno
        for p in params:
            env.vars[p] = UNKNOWN
        for p, d in zip(params[len(params) - len(defaults) :], defaults, strict=True):
            env.vars[p] = _const_default(d, unset_none)
            env.origin[p] = (str(member.mod.path), getattr(d, "lineno", line))
        for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True):
            env.vars[p.arg] = _const_default(d, unset_none)
            env.origin[p.arg] = (str(member.mod.path), getattr(d, "lineno", line))
        return params + [p.arg for p in a.kwonlyargs]

    def _follow(self, member: _Member, call: ast.Call, env: _Env) -> set[int]:
        if id(member.fn) in self.stack or len(self.stack) >= _MAX_DEPTH:
            return {0}
        callee = env.copy() if member.closure else _Env(selfv=dict(env.selfv))
        names = self._bind_defaults(member, callee, unset_none=False)
        a = member.fn.args
        positional = [p.arg for p in [*a.posonlyargs, *a.args]]
        if positional and positional[0] in ("self", "cls") and member.owner:
            positional = positional[1:]
        bound: list[tuple[str, ast.expr]] = []
        for i, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                break
            if i < len(positional):
                bound.append((positional[i], arg))
        has_kwargs = False
        for kw in call.keywords:
            if kw.arg is None:
                has_kwargs = True
            elif kw.arg in names:
                bound.append((kw.arg, kw.value))
        if has_kwargs:
            done = {p for p, _ in bound}
            for p in names:
                if p not in done:
                    callee.vars[p] = UNKNOWN
        for p, expr in bound:
            callee.vars[p] = self._eval(expr, env)
            refs = self._refs(expr, env)
            if refs:
                callee.aliases[p] = refs
            callee.defs[p] = (self._def(expr, env),)
            callee.origin[p] = (self.path, expr.lineno)
        res = self._enter(member, callee)
        env.selfv.update(callee.selfv)
        return res

    # -- expressions ----------------------------------------------------------------------

    def _eval(self, node: ast.AST, env: _Env) -> _Value:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return env.vars.get(node.id, UNKNOWN)
        if isinstance(node, ast.Attribute):
            attr = _self_attr(node)
            if attr is None:
                return UNKNOWN
            if attr in env.selfv:
                return env.selfv[attr]
            prop = self.ctx.properties.get(attr)
            return self._eval_property(prop, env) if prop else UNKNOWN
        if isinstance(node, ast.UnaryOp):
            v = self._eval(node.operand, env)
            if isinstance(node.op, ast.Not):
                t = _truth(v)
                return UNKNOWN if t is None else not t
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                if isinstance(node.op, ast.USub):
                    return -v
                if isinstance(node.op, ast.UAdd):
                    return v
            return UNKNOWN
        if isinstance(node, ast.BoolOp):
            return self._eval_boolop(node, env)
        if isinstance(node, ast.Compare):
            return self._eval_compare(node, env)
        if isinstance(node, ast.BinOp):
            fn = _BIN.get(type(node.op))
            a, b = self._eval(node.left, env), self._eval(node.right, env)
            if fn is None or not all(isinstance(x, (int, float)) for x in (a, b)):
                return UNKNOWN
            try:
                return fn(a, b)
            except Exception:
                return UNKNOWN
        if isinstance(node, ast.IfExp):
            t = _truth(self._eval(node.test, env))
            if t is True:
                return self._eval(node.body, env)
            if t is False:
                return self._eval(node.orelse, env)
            return _join_value(self._eval(node.body, env), self._eval(node.orelse, env))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            fn = _PURE_BUILTINS.get(node.func.id)
            args = [self._eval(x, env) for x in node.args]
            if fn is None or not args or any(x is UNKNOWN or x is UNSET for x in args):
                return UNKNOWN
            try:
                return fn(*args)
            except Exception:
                return UNKNOWN
        return UNKNOWN

    def _eval_property(self, prop: _Member, env: _Env) -> _Value:
        body = [s for s in prop.fn.body if not _is_docstring(s)]
        if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
            return UNKNOWN
        if self._prop_depth > 4:
            return UNKNOWN
        self._prop_depth += 1
        try:
            return self._eval(body[0].value, _Env(selfv=env.selfv))
        finally:
            self._prop_depth -= 1

    def _eval_boolop(self, node: ast.BoolOp, env: _Env) -> _Value:
        is_and = isinstance(node.op, ast.And)
        unknown = False
        last: _Value = UNKNOWN
        for operand in node.values:
            v = self._eval(operand, env)
            t = _truth(v)
            if t is None:
                unknown = True
                continue
            if t is not is_and:  # short-circuits: falsy under `and`, truthy under `or`
                return t if unknown else v
            last = v
        return UNKNOWN if unknown else last

    def _eval_compare(self, node: ast.Compare, env: _Env) -> _Value:
        left = self._eval(node.left, env)
        result: _Value = True
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = self._eval(right_node, env)
            fn = _CMP.get(type(op))
            if fn is None or any(x is UNKNOWN or x is UNSET for x in (left, right)):
                value: _Value = UNKNOWN
            else:
                try:
                    value = bool(fn(left, right))
                except Exception:
                    value = UNKNOWN
            if value is False:
                return False
            if value is UNKNOWN:
                result = UNKNOWN
            left = right
        return result

    def _refs(self, node: ast.AST, env: _Env) -> frozenset[str]:
        """Self attributes an expression may evaluate to: `self.transformer`, its aliases."""
        attr = _self_attr(node)
        if attr is not None:
            return frozenset({attr}) if attr not in self.ctx.methods else frozenset()
        if isinstance(node, ast.Name):
            return env.aliases.get(node.id, frozenset())
        if isinstance(node, ast.IfExp):
            t = _truth(self._eval(node.test, env))
            if t is True:
                return self._refs(node.body, env)
            if t is False:
                return self._refs(node.orelse, env)
            return self._refs(node.body, env) | self._refs(node.orelse, env)
        if isinstance(node, ast.BoolOp):
            out: frozenset[str] = frozenset()
            for v in node.values:
                out |= self._refs(v, env)
            return out
        return frozenset()

    def _def(self, value: ast.AST, env: _Env) -> _Def:
        # data flow is only needed for the denoiser's inputs, i.e. inside the denoising loop
        deps: tuple[tuple[str, tuple[_Def, ...]], ...] = ()
        if self.current is not None:
            deps = tuple((n, env.defs.get(n, ())) for n in sorted(_names(value)))
        return _Def(value, getattr(value, "lineno", 0), self.path, deps)

    def _is_denoiser_call(self, call: ast.Call, env: _Env) -> bool:
        f = call.func
        attr = _self_attr(f)
        if attr is not None:
            return attr in self.denoisers
        if isinstance(f, ast.Name):
            return bool(env.aliases.get(f.id, frozenset()) & self.denoisers)
        if isinstance(f, ast.Attribute) and f.attr in _FORWARD:
            return bool(self._refs(f.value, env) & self.denoisers)
        return False

    def _cexpr(self, node: ast.AST | None, env: _Env) -> set[int]:
        """Possible numbers of denoiser calls made while evaluating an expression."""
        if node is None or id(node) not in self.ctx.hot:
            return {0}
        if isinstance(node, ast.IfExp):
            test = self._cexpr(node.test, env)
            t = _truth(self._eval(node.test, env))
            if t is True:
                return _add(test, self._cexpr(node.body, env))
            if t is False:
                return _add(test, self._cexpr(node.orelse, env))
            return _add(test, self._cexpr(node.body, env) | self._cexpr(node.orelse, env))
        if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return {0}
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner: set[int] = {0}
            for child in ast.iter_child_nodes(node):
                inner = _add(inner, self._cexpr(child, env))
            heads = " ".join(_text(g.iter) for g in node.generators)
            if max(inner) > 0 and self.current is not None and re.search(_GUIDANCE_LOOP, heads):
                self.current.inner.append(
                    Evidence(
                        f"denoiser called in a comprehension over guidance batches `{heads}`: "
                        "several calls per step",
                        self.path,
                        node.lineno,
                    )
                )
                return {_CAP}
            return inner
        total: set[int] = {0}
        if isinstance(node, ast.Call):
            total = self._ccall(node, env)
            children: list[ast.AST] = [*node.args, *(k.value for k in node.keywords)]
            f = node.func
            if isinstance(f, ast.Attribute) and not _is_self(f.value):
                children.append(f.value)
            elif not isinstance(f, (ast.Attribute, ast.Name)):
                children.append(f)
        else:
            children = list(ast.iter_child_nodes(node))
        for child in children:
            total = _add(total, self._cexpr(child, env))
        return total

    def _ccall(self, call: ast.Call, env: _Env) -> set[int]:
        if self._is_denoiser_call(call, env):
            self._record_site(call, env)
            return {1}
        f = call.func
        attr = _self_attr(f)
        if attr is not None and attr in self.ctx.methods:
            return self._follow(self.ctx.methods[attr], call, env)
        if isinstance(f, ast.Name):
            local = self.local_funcs.get(f.id)
            if local is not None:
                return self._follow(local, call, env)
            if f.id not in env.vars and f.id in self.mods[-1].functions:
                fn = self.mods[-1].functions[f.id]
                return self._follow(_Member(self.mods[-1], fn, ""), call, env)
        return {0}

    def _record_site(self, call: ast.Call, env: _Env) -> None:
        if self.current is None:
            return
        arg_names: dict[str, None] = {}  # in argument order: the latent input usually comes first
        for a in [*call.args, *(k.value for k in call.keywords)]:
            for n in ast.walk(a):
                if isinstance(n, ast.Name):
                    arg_names.setdefault(n.id)
        arg_defs = tuple((n, env.defs.get(n, ())) for n in arg_names)
        self.current.sites.append(
            _Site(
                call,
                self.stmt,
                self.scopes[-1] if self.scopes else call,
                self.path,
                tuple(self.guards),
                self.contexts[-1] if self.contexts else None,
                arg_defs,
            )
        )

    def _note_skipped(self, stmts: Iterable[ast.AST], guard: _Guard, env: _Env) -> None:
        if self.current is None:
            return
        for stmt in stmts:
            if id(stmt) not in self.ctx.hot:
                continue
            for node in ast.walk(stmt):
                if isinstance(node, ast.Call) and self._is_denoiser_call(node, env):
                    self.current.skipped.append(
                        _Site(node, None, node, self.path, tuple(self.guards), None, (), guard)
                    )

    def _explain_guard(self, test: ast.expr, env: _Env) -> None:
        """Evidence for where the names a decisive guard reads got their default-path values."""
        if self.current is None:
            return
        notes = self.current.guard_notes
        seen = {(e.path, e.line) for e in notes}

        def add(msg: str, where: tuple[str, int] | None) -> bool:
            if where is None or where in seen or len(notes) >= 12:
                return False
            seen.add(where)
            notes.append(Evidence(msg, where[0], where[1]))
            return True

        def explain(expr: ast.AST, local: _Env | None, depth: int) -> None:
            for node in ast.walk(expr):
                if isinstance(node, ast.Name) and local is not None and node.id in local.origin:
                    explain_name(node.id, local, depth)
                    continue
                attr = _self_attr(node)
                if attr is None:
                    continue
                if attr in env.selfv and ("self." + attr) in env.origin:
                    add(
                        f"`self.{attr}` is {_fmt(env.selfv[attr])} on the default path",
                        env.origin["self." + attr],
                    )
                prop = self.ctx.properties.get(attr)
                if prop is None or depth >= 2:
                    continue
                body = [st for st in prop.fn.body if not _is_docstring(st)]
                shown = _text(body[0]) if body else "..."
                add(
                    f"property `{attr}`: `{shown}` -> {_fmt(self._eval(node, env))}",
                    (str(prop.mod.path), prop.fn.lineno),
                )
                if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
                    explain(body[0].value, None, depth + 1)

        def explain_name(name: str, local: _Env, depth: int) -> None:
            value = local.vars.get(name, UNKNOWN)
            defs = local.defs.get(name, ())
            where = local.origin[name]
            if not defs:
                add(f"parameter `{name}` defaults to {_fmt(value)}", where)
                return
            if len(defs) > 1:
                add(f"`{name}` is {_fmt(value)} on the default path (set in branches)", where)
                return
            d = defs[0].value
            if isinstance(d, (ast.For, ast.AsyncFor, ast.AugAssign)):
                return  # a loop variable or an accumulator: unknown, nothing to show
            pure = _is_pure(d)
            if depth > 0 and value is UNKNOWN and not pure:
                return
            fresh = add(f"`{name} = {_text(d)}` -> {_fmt(value)} on the default path", where)
            if fresh and pure and depth < 2:
                explain(d, local, depth + 1)

        explain(test, env, 0)

    # -- statements -----------------------------------------------------------------------

    def _block(self, stmts: Sequence[ast.stmt], env: _Env) -> set[tuple[int, bool]]:
        state: set[tuple[int, bool]] = {(0, False)}
        for stmt in stmts:
            if all(done for _, done in state):
                break
            res = self._stmt(stmt, env)
            nxt: set[tuple[int, bool]] = set()
            for n, done in state:
                if done:
                    nxt.add((n, True))
                    continue
                for m, d2 in res:
                    nxt.add((min(n + m, _CAP), d2))
            state = nxt
        return state

    def _simple(self, counts: set[int], done: bool = False) -> set[tuple[int, bool]]:
        return {(n, done) for n in counts}

    def _stmt(self, stmt: ast.stmt, env: _Env) -> set[tuple[int, bool]]:
        self.stmt = stmt
        if isinstance(stmt, ast.Assign):
            counts = self._cexpr(stmt.value, env)
            self._assign(stmt.targets, stmt.value, env)
            return self._simple(counts)
        if isinstance(stmt, ast.AnnAssign):
            counts = self._cexpr(stmt.value, env)
            if stmt.value is not None:
                self._assign([stmt.target], stmt.value, env)
            return self._simple(counts)
        if isinstance(stmt, ast.AugAssign):
            counts = self._cexpr(stmt.value, env)
            self._bind(stmt.target, UNKNOWN, frozenset(), self._def(stmt, env), env)
            return self._simple(counts)
        if isinstance(stmt, ast.Expr):
            return self._simple(self._cexpr(stmt.value, env))
        if isinstance(stmt, ast.Return):
            return self._simple(self._cexpr(stmt.value, env), done=True)
        if isinstance(stmt, (ast.Continue, ast.Break, ast.Raise)):
            return {(0, True)}
        if isinstance(stmt, ast.If):
            return self._if(stmt, env)
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
            return self._loop(stmt, env)
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            return self._with(stmt, env)
        if isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":  # try / try*
            res = self._block(getattr(stmt, "body", []), env)
            rest = [*getattr(stmt, "orelse", []), *getattr(stmt, "finalbody", [])]
            return _seq(res, self._block(rest, env))
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            # a closure defined in `__call__` (e.g. a per-step helper) is followed when called
            self.local_funcs[stmt.name] = _Member(self.mods[-1], stmt, "", closure=True)
            return {(0, False)}
        if isinstance(stmt, ast.Match):
            outs: list[_Env] = []
            res_all: set[tuple[int, bool]] = set()
            for case in stmt.cases:
                e = env.copy()
                res_all |= self._block(case.body, e)
                outs.append(e)
            if outs:
                env.assign_from(_join([env, *outs]))
            return res_all or {(0, False)}
        return {(0, False)}

    def _assign(self, targets: Sequence[ast.expr], value: ast.expr, env: _Env) -> None:
        val = self._eval(value, env)
        refs = self._refs(value, env)
        d = self._def(value, env)
        for t in targets:
            if (
                isinstance(t, (ast.Tuple, ast.List))
                and isinstance(value, (ast.Tuple, ast.List))
                and len(t.elts) == len(value.elts)
            ):
                for te, ve in zip(t.elts, value.elts, strict=True):
                    self._bind(
                        te, self._eval(ve, env), self._refs(ve, env), self._def(ve, env), env
                    )
            else:
                self._bind(t, val, refs, d, env)

    def _bind(self, target: ast.AST, val: _Value, refs: frozenset[str], d: _Def, env: _Env) -> None:
        where = (self.path, getattr(target, "lineno", d.line))
        if isinstance(target, ast.Name):
            env.vars[target.id] = val
            env.defs[target.id] = (d,)
            env.origin[target.id] = where
            if refs:
                env.aliases[target.id] = refs
            else:
                env.aliases.pop(target.id, None)
        elif (attr := _self_attr(target)) is not None:
            env.selfv[attr] = val
            env.origin["self." + attr] = where
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._bind(elt, UNKNOWN, frozenset(), d, env)
        elif isinstance(target, ast.Starred):
            self._bind(target.value, UNKNOWN, frozenset(), d, env)

    def _if(self, stmt: ast.If, env: _Env) -> set[tuple[int, bool]]:
        pre = self._simple(self._cexpr(stmt.test, env))
        t = _truth(self._eval(stmt.test, env))
        if t is not None:
            taken, skipped = (stmt.body, stmt.orelse) if t else (stmt.orelse, stmt.body)
            before = len(self.current.skipped) if self.current else 0
            self._note_skipped(skipped, _Guard(stmt.test, t, "false"), env)
            self.guards.append(_Guard(stmt.test, not t, "true"))
            try:
                res = self._block(taken, env)
            finally:
                self.guards.pop()
            if self.current is not None and (
                len(self.current.skipped) > before or any(n for n, _ in res)
            ):
                self._explain_guard(stmt.test, env)
            return _seq(pre, res)
        e1, e2 = env.copy(), env.copy()
        self.guards.append(_Guard(stmt.test, False, "maybe"))
        try:
            r1 = self._block(stmt.body, e1)
        finally:
            self.guards.pop()
        self.guards.append(_Guard(stmt.test, True, "maybe"))
        try:
            r2 = self._block(stmt.orelse, e2)
        finally:
            self.guards.pop()
        if self.current is not None and any(n for n, _ in r1 | r2):
            self._explain_guard(stmt.test, env)
        live = [e for e, r in ((e1, r1), (e2, r2)) if not all(d for _, d in r)] or [e1, e2]
        env.assign_from(_join(live))
        return _seq(pre, r1 | r2)

    def _with(self, stmt: ast.With | ast.AsyncWith, env: _Env) -> set[tuple[int, bool]]:
        pre: set[int] = {0}
        label = None
        for item in stmt.items:
            pre = _add(pre, self._cexpr(item.context_expr, env))
            ce = item.context_expr
            if (
                isinstance(ce, ast.Call)
                and isinstance(ce.func, ast.Attribute)
                and ce.func.attr == "cache_context"
                and ce.args
                and isinstance(ce.args[0], ast.Constant)
            ):
                label = str(ce.args[0].value)
            if item.optional_vars is not None:
                self._bind(item.optional_vars, UNKNOWN, frozenset(), self._def(ce, env), env)
        if label is not None:
            self.contexts.append(label)
        try:
            res = self._block(stmt.body, env)
        finally:
            if label is not None:
                self.contexts.pop()
        return _seq(self._simple(pre), res)

    def _is_step_loop(self, stmt: ast.For | ast.AsyncFor | ast.While) -> bool:
        head = stmt.test if isinstance(stmt, ast.While) else stmt.iter
        if re.search(_STEP_LOOP, _text(head)):
            return True
        if not self.relaxed:
            return False
        return any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "step"
            for n in ast.walk(stmt)
        )

    def _loop(self, stmt: ast.For | ast.AsyncFor | ast.While, env: _Env) -> set[tuple[int, bool]]:
        pre: set[int] = self._cexpr(stmt.test if isinstance(stmt, ast.While) else stmt.iter, env)
        body_env = env.copy()
        if not isinstance(stmt, ast.While):
            loop_var = _Def(stmt, stmt.lineno, self.path, ())
            self._bind(stmt.target, UNKNOWN, frozenset(), loop_var, body_env)
        if (
            self.current is None
            and self._is_step_loop(stmt)
            and not self._has_inner_step_loop(stmt)
        ):
            loop = _Loop(stmt, self.path, self.ctx.name)
            self.current = loop
            saved_guards, self.guards = self.guards, []
            try:
                loop.counts = self._block(stmt.body, body_env)
            finally:
                self.current = None
                self.guards = saved_guards
            self.loops.append(loop)
            env.assign_from(_join([env, body_env]))
            return self._simple(pre)
        res = self._block(stmt.body, body_env)
        env.assign_from(_join([env, body_env]))
        if self.current is None:
            return self._simple(pre)
        # an inner loop inside the denoising loop: each iteration may call the denoiser again
        per_iter = {n for n, _ in res}
        if max(per_iter) == 0:
            return self._simple(pre)
        times = self._iterations(stmt, env)
        head = _text(stmt.test if isinstance(stmt, ast.While) else stmt.iter)
        if not re.search(_GUIDANCE_LOOP, head) and not (times and isinstance(stmt.iter, _SEQ)):
            # tiles, views, frames...: the calls of one iteration are what alternate per step
            self.current.inner.append(
                Evidence(
                    f"denoiser called inside inner loop over `{head}` (not a guidance-batch loop): "
                    "calls counted per iteration",
                    self.path,
                    stmt.lineno,
                )
            )
            return self._simple(_add(pre, per_iter))
        how = f"{times} iterations" if times else "one per guidance batch"
        self.current.inner.append(
            Evidence(
                f"denoiser called inside guidance loop over `{head}` ({how}): several calls a step",
                self.path,
                stmt.lineno,
            )
        )
        k = times if times is not None else 2
        return self._simple(_add(pre, {min(n * k, _CAP) for n in per_iter}))

    def _iterations(self, stmt: ast.For | ast.AsyncFor | ast.While, env: _Env) -> int | None:
        if isinstance(stmt, ast.While):
            return None
        it = stmt.iter
        if isinstance(it, (ast.List, ast.Tuple)):
            return len(it.elts)
        if (
            isinstance(it, ast.Call)
            and isinstance(it.func, ast.Name)
            and it.func.id == "range"
            and len(it.args) == 1
        ):
            v = self._eval(it.args[0], env)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        return None

    def _has_inner_step_loop(self, stmt: ast.AST) -> bool:
        for node in ast.walk(stmt):
            if node is stmt or not isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
                continue
            head = node.test if isinstance(node, ast.While) else node.iter
            if re.search(_STEP_LOOP, _text(head)):
                return True
        return False


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _seq(a: set[tuple[int, bool]], b: set[tuple[int, bool]]) -> set[tuple[int, bool]]:
    out: set[tuple[int, bool]] = set()
    for n, d1 in a:
        if d1:
            out.add((n, True))
            continue
        for m, d2 in b:
            out.add((min(n + m, _CAP), d2))
    return out


# ------------------------------------------------------------------------------------------------
# Denoiser identification


def _denoisers(ctx: _ClassCtx, hint: str | None) -> tuple[set[str], str]:
    used = ctx.read_attrs
    if hint:
        family = {
            a
            for a in used | ctx.components
            if a == hint or re.fullmatch(re.escape(hint) + r"_?\d+", a)
        }
        if family & used:
            return family, f"hinted denoiser `{hint}`"
    pool = ctx.components or ctx.called_attrs
    named = {
        a
        for a in pool
        if re.fullmatch(_DENOISER_NAME, a) and not re.search(_NOT_DENOISER, a) and a in used
    }
    if named:
        return named, "denoiser component(s) " + ", ".join(f"`{a}`" for a in sorted(named))
    flow = _flow_denoisers(ctx) - set(ctx.methods)
    if flow:
        return flow, "component(s) whose output feeds `scheduler.step`: " + ", ".join(
            f"`{a}`" for a in sorted(flow)
        )
    rest = {a for a in ctx.called_attrs if not re.search(_NOT_DENOISER, a)}
    rest &= ctx.components or rest
    return rest, "called component(s) " + ", ".join(f"`{a}`" for a in sorted(rest))


def _flow_sources(value: ast.AST) -> tuple[set[str], set[str]]:
    """Names a value is computed from, and the `self.x(...)` calls producing it directly.

    Arguments of those calls are not followed: a controlnet output fed to the transformer does not
    make the controlnet the producer of the prediction.
    """
    names: set[str] = set()
    calls: set[str] = set()
    top = value
    while isinstance(top, ast.IfExp):
        top = top.body
    if (attr := _self_attr(top)) is not None:  # `model = self.transformer`: an alias
        calls.add(attr)
    stack: list[ast.AST] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call):
            f = node.func
            attr = _self_attr(f)
            if attr is None and isinstance(f, ast.Attribute) and f.attr in _FORWARD:
                attr = _self_attr(f.value)
            if attr is not None:
                calls.add(attr)
                continue
        if isinstance(node, ast.Name):
            names.add(node.id)
        stack.extend(ast.iter_child_nodes(node))
    return names, calls


def _flow_denoisers(ctx: _ClassCtx) -> set[str]:
    """`self.x(...)` calls in a loop whose result reaches the first argument of `*.step(...)`."""
    out: set[str] = set()
    for _, c in ctx.mro:
        for loop in ast.walk(c):
            if not isinstance(loop, (ast.For, ast.While)):
                continue
            assigns: list[tuple[set[str], set[str], set[str]]] = []
            needed: set[str] = set()
            for node in ast.walk(loop):
                if isinstance(node, ast.Assign):
                    targets: set[str] = set()
                    for t in node.targets:
                        targets |= _names(t)
                    assigns.append((targets, *_flow_sources(node.value)))
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "step"
                    and node.args
                ):
                    needed |= _names(node.args[0])
            if not needed:
                continue
            changed = True
            while changed:
                changed = False
                for targets, names, calls in assigns:
                    if targets & needed:
                        out |= calls
                        if names - needed:
                            needed |= names
                            changed = True
    return {a for a in out if not re.search(_NOT_DENOISER, a)}


# ------------------------------------------------------------------------------------------------
# Batched-CFG detection


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute):
            return f.attr
        if isinstance(f, ast.Name):
            return f.id
    return None


def _dim0(call: ast.Call, pos: int) -> bool:
    """True when a cat/chunk/split call works on dim 0 (the default)."""
    dim: ast.expr | None = None
    for k in call.keywords:
        if k.arg in ("dim", "axis"):
            dim = k.value
    if dim is None and len(call.args) > pos:
        dim = call.args[pos]
    return dim is None or (isinstance(dim, ast.Constant) and dim.value == 0)


_SEQ = (ast.List, ast.Tuple)


def _doubling(node: ast.AST) -> ast.AST | None:
    """The sub-expression stacking a batch twice: `cat([x] * 2)`, `cat([x, x])`, `x.repeat(2)`."""
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Call):
            continue
        name = _call_name(sub)
        if name in ("cat", "concat", "concatenate", "stack") and sub.args and _dim0(sub, 1):
            seq = sub.args[0]
            if (
                isinstance(seq, ast.BinOp)
                and isinstance(seq.op, ast.Mult)
                and (isinstance(seq.left, _SEQ) or isinstance(seq.right, _SEQ))
            ):
                return sub
            if isinstance(seq, (ast.List, ast.Tuple)) and len(seq.elts) >= 2:
                texts = {_text(e) for e in seq.elts}
                if len(texts) == 1:
                    return sub
        if name == "repeat" and isinstance(sub.func, ast.Attribute) and sub.args:
            first = sub.args[0]
            if (
                isinstance(first, ast.Constant)
                and isinstance(first.value, int)
                and first.value >= 2
            ):
                return sub
    return None


def _find_doubling(
    defs: Iterable[_Def], depth: int = 0, seen: set[int] | None = None
) -> _Def | None:
    seen = set() if seen is None else seen
    for d in defs:
        if id(d) in seen or isinstance(d.value, (ast.For, ast.AsyncFor)):
            continue
        seen.add(id(d))
        if _doubling(d.value) is not None:
            return d
        if depth < 4:
            for _, deps in d.deps:
                hit = _find_doubling(deps, depth + 1, seen)
                if hit is not None:
                    return hit
    return None


def _targets(stmt: ast.stmt | None) -> set[str]:
    if isinstance(stmt, ast.Assign):
        out: set[str] = set()
        for t in stmt.targets:
            if isinstance(t, (ast.Name, ast.Tuple, ast.List)):
                out |= _names(t)
        return out
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return {stmt.target.id}
    return set()


def _passthrough(value: ast.AST, name: str) -> bool:
    """`x.to(...)`, `x[0]`, `x.float()`, `x.sample`: a value still holding the same batch."""
    node = value
    while True:
        if isinstance(node, ast.Name):
            return node.id == name
        if isinstance(node, (ast.Subscript, ast.Attribute)):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("chunk", "split"):
                return False
            node = node.func.value
        else:
            return False


def _output_split(site: _Site) -> ast.Call | None:
    """`pred.chunk(2)` / `torch.chunk(pred, 2)` / `pred.split(...)` on dim 0 after the call."""
    names = _targets(site.stmt)
    if not names or site.stmt is None:
        return None
    start = getattr(site.stmt, "end_lineno", site.call.lineno) or site.call.lineno
    events: list[tuple[int, int, ast.AST]] = []
    for node in ast.walk(site.scope):
        line = getattr(node, "lineno", 0)
        if line <= start:
            continue
        if isinstance(node, ast.Assign):
            events.append((line, 1, node))
        elif isinstance(node, ast.Call) and _call_name(node) in ("chunk", "split", "tensor_split"):
            events.append((line, 0, node))
    live = set(names)
    for _, kind, node in sorted(events, key=lambda e: (e[0], e[1])):
        if kind == 1:
            assert isinstance(node, ast.Assign)
            for t in node.targets:
                for n in _names(t) & live:
                    if not _passthrough(node.value, n):
                        live.discard(n)
            continue
        assert isinstance(node, ast.Call)
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in live:
            if _dim0(node, 1):
                return node
        elif (
            node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in live
            and _dim0(node, 2)
        ):
            return node
        if not live:
            break
    return None


# ------------------------------------------------------------------------------------------------
# Decision


@dataclass
class _Verdict:
    value: bool | None
    confidence: float
    evidence: list[Evidence]


def _site_text(site: _Site) -> str:
    text = _text(site.call.func) + "(...)"
    if site.context:
        text += f" in cache_context({site.context!r})"
    return text


def _guard_text(site: _Site) -> str:
    if not site.guards:
        return " unconditionally"
    g = site.guards[-1]
    how = "True by default" if g.status == "true" else "may be True: unknown statically"
    return f" when `{g.text()}` ({how})"


def _decide_loop(loop: _Loop, denoiser_note: str) -> _Verdict:
    ev: list[Evidence] = []
    head = loop.node.test if isinstance(loop.node, ast.While) else loop.node.iter
    n = loop.max_calls
    sites = loop.sites
    first = sites[0] if sites else None
    doubled = _find_doubling(d for _, defs in first.arg_defs for d in defs) if first else None
    split = _output_split(first) if first else None
    batched_ev: list[Evidence] = []
    if doubled is not None:
        shown = _text(_doubling(doubled.value) or doubled.value)
        batched_ev.append(
            Evidence(
                f"denoiser input batched for CFG: `{shown}`",
                doubled.path,
                doubled.line,
            )
        )
    if split is not None and first is not None:
        batched_ev.append(
            Evidence(
                f"prediction split into uncond/cond halves: `{_text(split)}`",
                first.path,
                split.lineno,
            )
        )
    uncertain = any(g.status == "maybe" for s in sites for g in s.guards)
    if n >= 2 and doubled is None:
        value, conf = True, 0.7 if uncertain else 0.9
        if loop.inner:
            conf = min(conf, 0.75)
        summary = (
            f"{'2+' if n > 2 else 2} denoiser calls per denoising step (e.g. cond and uncond as "
            "separate calls) -> has_separate_cfg=True"
        )
    elif n >= 2:
        value, conf = False, 0.6
        summary = (
            "batched CFG: cond and uncond share one denoiser call; "
            f"{n if n < _CAP else 'several'} calls per step in total (extra guidance passes) "
            "-> has_separate_cfg=False"
        )
    elif n == 1:
        value = False
        conf = 0.9 if batched_ev else (0.8 if loop.skipped else 0.85)
        if batched_ev:
            summary = "one denoiser call per step with batched CFG -> has_separate_cfg=False"
        elif loop.skipped:
            summary = (
                "one denoiser call per step on the default path (the other call's guard is "
                "False by default) -> has_separate_cfg=False"
            )
        else:
            summary = "one denoiser call per step, no CFG branch -> has_separate_cfg=False"
    else:
        return _Verdict(
            None,
            0.0,
            [
                Evidence(
                    f"loop `for ... in {_text(head)}` makes no call to {denoiser_note}",
                    loop.path,
                    loop.node.lineno,
                )
            ],
        )
    ev.append(
        Evidence(
            f"{summary} (loop over `{_text(head)}` in {loop.where})", loop.path, loop.node.lineno
        )
    )
    for i, site in enumerate(sites[:4], 1):
        ev.append(
            Evidence(
                f"denoiser call #{i}: {_site_text(site)}{_guard_text(site)}",
                site.path,
                site.call.lineno,
            )
        )
    for site in loop.skipped[:3]:
        ev.append(
            Evidence(
                f"denoiser call {_site_text(site)} skipped on the default path: "
                f"`{site.skipped_by.text() if site.skipped_by else '?'}` is False",
                site.path,
                site.call.lineno,
            )
        )
    ev.extend(loop.inner[:3])
    ev.extend(batched_ev)
    ev.extend(loop.guard_notes[:6])
    return _Verdict(value, conf, ev)


def _analyze_class(loader: _Loader, ctx: _ClassCtx, hint: str | None, depth: int) -> _Verdict:
    denoisers, note = _denoisers(ctx, hint)
    where = Evidence(
        f"{ctx.name}: {note or 'no denoiser component found'}", str(ctx.mod.path), ctx.cls.lineno
    )
    loops: list[_Loop] = []
    if denoisers:
        for relaxed in (False, True):
            walker = _Walker(ctx, denoisers, relaxed)
            walker.run_call()
            loops = [lp for lp in walker.loops if lp.max_calls > 0 or lp.sites]
            if loops:
                break
    if loops:
        verdicts = [_decide_loop(lp, note) for lp in loops]
        chosen = next((v for v in verdicts if v.value is True), None) or next(
            (v for v in verdicts if v.value is not None), verdicts[0]
        )
        chosen.evidence.append(where)
        return chosen
    sub = _delegate(loader, ctx, hint, depth)
    if sub is not None:
        return sub
    call = ctx.methods["__call__"]
    reason = (
        f"{ctx.name}.__call__ has no denoising loop calling {note}"
        if denoisers
        else f"{ctx.name}: no denoiser component (transformer/unet/prior/...) is called"
    )
    return _Verdict(None, 0.0, [Evidence(reason, str(call.mod.path), call.fn.lineno)])


def _delegate(loader: _Loader, ctx: _ClassCtx, hint: str | None, depth: int) -> _Verdict | None:
    """A composite pipeline whose `__call__` runs sub-pipelines (`self.generation_pipe(...)`)."""
    if depth >= _MAX_SUBPIPE_DEPTH or not ctx.subpipes:
        return None
    call = ctx.methods["__call__"]
    results: list[tuple[str, int, _Verdict]] = []
    for node in ast.walk(call.fn):
        if not isinstance(node, ast.Call):
            continue
        attr = _self_attr(node.func)
        if attr is None or attr not in ctx.subpipes:
            continue
        mod, cls_name = ctx.subpipes[attr]
        found = loader.resolve_class(mod, cls_name)
        if found is None:
            continue
        sub_ctx = _ClassCtx(loader, found[0], found[1], cross_file=True)
        if not sub_ctx.has_call():
            continue
        results.append((attr, node.lineno, _analyze_class(loader, sub_ctx, hint, depth + 1)))
    known = [r for r in results if r[2].value is not None]
    if not known:
        return None
    value = any(v.value for _, _, v in known)
    ev = [
        Evidence(
            f"{ctx.name}.__call__ delegates to sub-pipeline `self.{attr}` "
            f"(has_separate_cfg={v.value})",
            str(call.mod.path),
            line,
        )
        for attr, line, v in known
    ]
    for _, _, v in known:
        ev.extend(v.evidence[:3])
    conf = min(v.confidence for _, _, v in known) * 0.9
    return _Verdict(value, conf, ev)


def infer_separate_cfg(
    path: pathlib.Path, source: str | None = None, transformer_attr_hint: str | None = None
) -> SeparateCfg:
    """Decide `has_separate_cfg` for the pipeline class(es) in `path` (or in `source`, if given).

    `transformer_attr_hint` names the pipeline attribute holding the transformer being integrated
    (e.g. "transformer"); without it the denoiser is found by component names and data flow.
    Returns value None (with evidence saying why) when no denoising loop is recognized.
    """
    spath = str(path)
    try:
        text = source if source is not None else path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=spath)
    except (OSError, UnicodeDecodeError) as exc:
        return SeparateCfg(None, (Evidence(f"cannot read pipeline file: {exc}", spath, 1),), 0.0)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None) or 1
        return SeparateCfg(
            None, (Evidence(f"cannot parse pipeline file: {exc}", spath, line),), 0.0
        )
    loader = _Loader()
    mod = loader.add(path, text, tree)
    verdicts: list[tuple[str, _Verdict]] = []
    for cross_file in (False, True):
        for cls in mod.classes.values():
            if cross_file and "__call__" not in _own_or_local_methods(mod, cls):
                ctx = _ClassCtx(loader, mod, cls, cross_file=True)
            elif cross_file:
                continue
            else:
                ctx = _ClassCtx(loader, mod, cls, cross_file=False)
            if ctx.has_call():
                verdicts.append((cls.name, _analyze_class(loader, ctx, transformer_attr_hint, 0)))
        if any(v.value is not None for _, v in verdicts):
            break
    if not verdicts:
        return SeparateCfg(
            None,
            (Evidence("no pipeline class (a class defining `__call__`) in this file", spath, 1),),
            0.0,
        )
    known = sorted((v for v in verdicts if v[1].value is not None), key=lambda v: len(v[0]))
    name, best = known[0] if known else verdicts[0]
    evidence = list(best.evidence)
    others = [(n, v.value) for n, v in known[1:] if v.value is not best.value]
    if others:
        evidence.append(
            Evidence(
                f"chose {name}; other pipeline classes in this file differ: "
                + ", ".join(f"{n}={val}" for n, val in others),
                spath,
                mod.classes[name].lineno,
            )
        )
    return SeparateCfg(
        best.value, tuple(evidence), best.confidence if best.value is not None else 0.0
    )


def _own_or_local_methods(mod: _Module, cls: ast.ClassDef) -> Iterator[str]:
    seen: set[int] = set()
    queue = [cls]
    while queue:
        c = queue.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        for node in c.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield node.name
        for b in c.bases:
            name = _base_name(b)
            if name and name in mod.classes:
                queue.append(mod.classes[name])
