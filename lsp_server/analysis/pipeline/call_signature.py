"""A pipeline's `__call__` signature, read statically: what a run may (or must) pass.

For each pipeline class of a file (a class defining `__call__` itself or through a base class of
the same file, or one imported with a relative import — the way `pipeline_class.ClassCtx`
flattens bases), the parameters of `__call__`:

* name, kind (`positional_only`, `positional_or_keyword`, `var_positional`, `keyword_only`,
  `var_keyword`), annotation text and default — as a JSON literal when it is one (module or class
  constants such as `DEFAULT_FRAMES` and simple arithmetic on them are resolved), and always as
  its source text;
* `required`: no default (never `self`, `*args` or `**kwargs`);
* a `role` guessed from the name's words, the annotation and the default — structurally, with no
  table of pipelines: `resolution`, `frames`, `duration`, `steps`, `guidance`, or `input` (a file
  input: image / video / audio / mask, `inputKind`);

and `checks`: conditions under which `__call__` (or a `check_inputs`-style method it calls with
its parameters) raises, with the parameters they read, the message, and for a condition that is
just a boolean parameter (`if use_resolution_binning: ... raise ValueError("Invalid sample
size")`) the value that skips it (`avoid`). Nothing is imported or executed.

Defaults are evaluated by `call_defaults`, roles guessed by `call_roles` and checks found by
`call_checks`; this module assembles them into `CallSignature`s.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from ..astutil import short_text
from ..model import AnalysisError
from ..sources import SourceFile
from .call_checks import MAX_CHECKS as MAX_CHECKS
from .call_checks import CallCheck, find_checks
from .call_defaults import NO_VALUE, ConstantEvaluator
from .call_roles import guess_role
from .pipeline_class import ClassCtx, Func, Loader, Module, own_or_local_methods

__all__ = [
    "CallCheck",
    "CallParameter",
    "CallSignature",
    "call_signatures",
    "choose_signature",
    "ordered_signatures",
]

MAX_CLASSES = 8


@dataclass(frozen=True)
class CallParameter:
    name: str
    kind: str
    line: int
    annotation: str | None = None
    has_default: bool = False
    default: Any = None  # a JSON value when `default_is_literal`
    default_text: str | None = None
    default_is_literal: bool = False
    required: bool = False
    role: str | None = None
    input_kind: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "annotation": self.annotation,
            "hasDefault": self.has_default,
            "default": self.default if self.default_is_literal else None,
            "defaultText": self.default_text,
            "defaultIsLiteral": self.default_is_literal,
            "required": self.required,
            "role": self.role,
            "inputKind": self.input_kind,
            "line": self.line,
        }


@dataclass(frozen=True)
class CallSignature:
    class_name: str
    defined_in: str  # the class whose `__call__` this is (a base class when inherited)
    path: str
    line: int
    parameters: tuple[CallParameter, ...]
    var_positional: str | None = None
    var_keyword: str | None = None
    checks: tuple[CallCheck, ...] = field(default_factory=tuple)
    # named `...Pipeline` or derived from a `...Pipeline` class (an attention processor or a
    # helper with `__call__` in the same file is not)
    is_pipeline: bool = True

    def parameter(self, name: str) -> CallParameter | None:
        return next((p for p in self.parameters if p.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "className": self.class_name,
            "definedIn": self.defined_in,
            "isPipeline": self.is_pipeline,
            "path": self.path,
            "line": self.line,
            "acceptsVarKeyword": self.var_keyword is not None,
            "varKeyword": self.var_keyword,
            "varPositional": self.var_positional,
            "parameters": [p.to_json() for p in self.parameters],
            "required": [p.name for p in self.parameters if p.required],
            "checks": [c.to_json() for c in self.checks],
        }


# --- entry points ------------------------------------------------------------------------------


def call_signatures(source: SourceFile, loader: Loader | None = None) -> list[CallSignature]:
    """The `__call__` signature of every pipeline class of `source` (in file order). Never raises
    for what the file contains; a base class that cannot be read is skipped."""
    loader = loader or Loader()
    try:
        mod = loader.add(source)
    except AnalysisError:
        return []
    out: list[CallSignature] = []
    for cls in mod.classes.values():
        if len(out) >= MAX_CLASSES:
            break
        cross_file = "__call__" not in own_or_local_methods(mod, cls)
        try:
            ctx = ClassCtx(loader, mod, cls, cross_file=cross_file)
        except (RecursionError, AnalysisError):
            continue
        member = ctx.methods.get("__call__")
        if member is None:
            continue
        out.append(_signature(loader, ctx, member.mod, member.fn, member.owner))
    return out


def choose_signature(
    signatures: list[CallSignature], preferred: str | None = None
) -> CallSignature | None:
    """The pipeline's signature: the class named `preferred` (model_index.json `_class_name`, the
    gate check's pipeline class) when the file defines it, else the first class with `__call__`."""
    if not signatures:
        return None
    if preferred:
        for s in signatures:
            if s.class_name == preferred:
                return s
    return next((s for s in signatures if s.is_pipeline), signatures[0])


def ordered_signatures(source: SourceFile, preferred: str | None = None) -> list[CallSignature]:
    """`call_signatures` with the chosen one (`choose_signature`) first; [] when the file cannot
    be analyzed (the rest of the analysis goes on without it)."""
    try:
        signatures = call_signatures(source)
    except Exception:  # a shape this reader did not foresee must not cost the transformer analysis
        return []
    chosen = choose_signature(signatures, preferred if isinstance(preferred, str) else None)
    if chosen is None:
        return []
    return [chosen, *(s for s in signatures if s is not chosen)]


# --- one signature -----------------------------------------------------------------------------


def _signature(loader: Loader, ctx: ClassCtx, mod: Module, fn: Func, owner: str) -> CallSignature:
    owner_cls = next((c for m, c in ctx.mro if m is mod and c.name == owner), None)
    consts = ConstantEvaluator(loader, mod, owner_cls)
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    defaults: dict[str, ast.expr] = {}
    for arg, default in zip(reversed(positional), reversed(a.defaults), strict=False):
        defaults[arg.arg] = default
    for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        if default is not None:
            defaults[arg.arg] = default
    params: list[CallParameter] = []
    decorators = {getattr(d, "id", getattr(d, "attr", None)) for d in fn.decorator_list}
    skip_first = "staticmethod" not in decorators
    for i, arg in enumerate(positional):
        if i == 0 and skip_first:
            continue  # self (or cls)
        kind = "positional_only" if i < len(a.posonlyargs) else "positional_or_keyword"
        params.append(_parameter(arg, kind, defaults.get(arg.arg), consts))
    if a.vararg is not None:
        params.append(_parameter(a.vararg, "var_positional", None, consts))
    for arg in a.kwonlyargs:
        params.append(_parameter(arg, "keyword_only", defaults.get(arg.arg), consts))
    if a.kwarg is not None:
        params.append(_parameter(a.kwarg, "var_keyword", None, consts))
    names = {p.name for p in params if p.kind not in ("var_positional", "var_keyword")}
    # only the checks a run's arguments decide: a switch that skips one, or sizes/counts/durations
    sized = {p.name for p in params if p.role and p.role != "input"}
    switches = {
        p.name
        for p in params
        if isinstance(p.default, bool) or (p.annotation or "").split("|")[0].strip() == "bool"
    }
    found = find_checks(ctx, mod, fn, names, switches)
    checks = [c for c in found if c.avoid or sized & set(c.params)]
    checks.sort(key=lambda c: (c.method != "__call__", c.path, c.line))
    pipeline_like = any(
        c.name.endswith("Pipeline") or any(_base_name(b).endswith("Pipeline") for b in c.bases)
        for _, c in ctx.mro
    )
    return CallSignature(
        is_pipeline=pipeline_like,
        class_name=ctx.name,
        defined_in=owner,
        path=str(mod.path),
        line=fn.lineno,
        parameters=tuple(params),
        var_positional=a.vararg.arg if a.vararg else None,
        var_keyword=a.kwarg.arg if a.kwarg else None,
        checks=tuple(checks),
    )


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Subscript):  # Generic[...] style bases
        node = node.value
    return node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")


def _parameter(
    arg: ast.arg, kind: str, default: ast.expr | None, consts: ConstantEvaluator
) -> CallParameter:
    annotation = _annotation_text(arg.annotation)
    has_default = default is not None
    value: Any = NO_VALUE
    text = None
    if default is not None:
        text = short_text(default, 200)
        value = consts.evaluate(default)
    literal = value is not NO_VALUE
    variadic = kind in ("var_positional", "var_keyword")
    role, input_kind = (None, None) if variadic else guess_role(arg.arg, annotation, value)
    return CallParameter(
        name=arg.arg,
        kind=kind,
        line=arg.lineno,
        annotation=annotation,
        has_default=has_default,
        default=value if literal else None,
        default_text=text,
        default_is_literal=literal,
        required=not has_default and not variadic,
        role=role,
        input_kind=input_kind,
    )


def _annotation_text(node: ast.expr | None) -> str | None:
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.strip()  # a forward reference: "PIL.Image.Image"
    return short_text(node, 200)
