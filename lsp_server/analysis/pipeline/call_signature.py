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
"""

from __future__ import annotations

import ast
import math
import operator
import re
from dataclasses import dataclass, field
from typing import Any

from ..astutil import short_text, walk_local
from ..model import AnalysisError
from ..sources import SourceFile, module_path
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
MAX_CHECKS = 24

_NO_VALUE = object()


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
class CallCheck:
    """`if <condition>: raise ...` on the call's parameters (in `__call__` or a checker)."""

    params: tuple[str, ...]
    condition: str
    message: str | None
    path: str
    line: int
    method: str
    avoid: dict[str, Any] | None = None  # parameter values that skip the check

    def to_json(self) -> dict[str, Any]:
        return {
            "params": list(self.params),
            "condition": self.condition,
            "message": self.message,
            "method": self.method,
            "avoid": self.avoid,
            "path": self.path,
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
    consts = _Constants(loader, mod, owner_cls)
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
    found = _checks(ctx, mod, fn, names, switches)
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
    arg: ast.arg, kind: str, default: ast.expr | None, consts: _Constants
) -> CallParameter:
    annotation = _annotation_text(arg.annotation)
    has_default = default is not None
    value: Any = _NO_VALUE
    text = None
    if default is not None:
        text = short_text(default, 200)
        value = consts.evaluate(default)
    literal = value is not _NO_VALUE
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


# --- defaults: literals, constants, simple arithmetic ------------------------------------------

_BINOPS: dict[type, Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


class _Constants:
    """Evaluates a default expression to a JSON value: literals, module / class constants (also
    through relative imports), unary minus, + - * / // % on numbers, tuples, lists, dicts."""

    def __init__(self, loader: Loader, mod: Module, owner: ast.ClassDef | None) -> None:
        self.loader = loader
        self.mod = mod
        self.owner = owner

    def evaluate(self, node: ast.expr) -> Any:
        try:
            value = self._eval(node, self.mod, self.owner, 0)
        except (ArithmeticError, TypeError, ValueError, RecursionError):
            return _NO_VALUE
        return value if value is _NO_VALUE or _is_json(value) else _NO_VALUE

    def _eval(self, node: ast.expr, mod: Module, owner: ast.ClassDef | None, depth: int) -> Any:
        if depth > 6:
            return _NO_VALUE
        if isinstance(node, ast.Constant):
            return node.value if not isinstance(node.value, bytes | complex) else _NO_VALUE
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            v = self._eval(node.operand, mod, owner, depth + 1)
            if isinstance(v, int | float) and not isinstance(v, bool):
                return -v if isinstance(node.op, ast.USub) else v
            return _NO_VALUE
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left = self._eval(node.left, mod, owner, depth + 1)
            right = self._eval(node.right, mod, owner, depth + 1)
            numbers = all(
                isinstance(v, int | float) and not isinstance(v, bool) for v in (left, right)
            )
            if not numbers:
                return _NO_VALUE
            return _BINOPS[type(node.op)](left, right)
        if isinstance(node, ast.Tuple | ast.List):
            items = [self._eval(e, mod, owner, depth + 1) for e in node.elts]
            return _NO_VALUE if any(v is _NO_VALUE for v in items) else items
        if isinstance(node, ast.Dict):
            out: dict[str, Any] = {}
            for k, v in zip(node.keys, node.values, strict=True):
                if k is None:
                    return _NO_VALUE
                key = self._eval(k, mod, owner, depth + 1)
                value = self._eval(v, mod, owner, depth + 1)
                if not isinstance(key, str) or value is _NO_VALUE:
                    return _NO_VALUE
                out[key] = value
            return out
        if isinstance(node, ast.Name):
            return self._name(node.id, mod, owner, depth)
        return _NO_VALUE

    def _name(self, name: str, mod: Module, owner: ast.ClassDef | None, depth: int) -> Any:
        if owner is not None:  # class-body names are visible to the defaults of its methods
            for stmt in owner.body:
                value = _assigned(stmt, name)
                if value is not None:
                    return self._eval(value, mod, None, depth + 1)
        stmt = mod.source.top_level.get(name)
        if stmt is not None:
            value = _assigned(stmt, name)
            return self._eval(value, mod, None, depth + 1) if value is not None else _NO_VALUE
        imp = mod.source.imports.get(name)
        if imp is not None and imp[1] and imp[2]:
            target = module_path(imp[0], imp[1], mod.path)
            other = self.loader.load(target) if target is not None else None
            if other is not None:
                return self._name(imp[2], other, None, depth + 1)
        return _NO_VALUE


def _assigned(stmt: ast.stmt, name: str) -> ast.expr | None:
    if isinstance(stmt, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == name for t in stmt.targets
    ):
        return stmt.value
    if (
        isinstance(stmt, ast.AnnAssign)
        and isinstance(stmt.target, ast.Name)
        and stmt.target.id == name
    ):
        return stmt.value
    return None


def _is_json(value: Any) -> bool:
    if value is None or isinstance(value, bool | int | str):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


# --- roles -------------------------------------------------------------------------------------

# Annotation words of values that are data (files, tensors), never a size or a count.
_MEDIA_TYPES = re.compile(
    r"PipelineImageInput|PipelineVideoInput|ImageInput|VideoInput|AudioInput|PIL\b|"
    r"Image\.Image|\bImage\b|ndarray|Tensor\b|FloatTensor|LongTensor"
)
_SCALAR_TYPES = re.compile(
    r"^(?:int|float|bool|str)(?:\s*\|\s*None)?$|^Optional\[(?:int|float|bool|str)\]$"
)
_MEDIA_WORDS = {
    "image": "image",
    "images": "image",
    "img": "image",
    "picture": "image",
    "video": "video",
    "videos": "video",
    "frames": "video",
    "audio": "audio",
    "audios": "audio",
    "waveform": "audio",
    "waveforms": "audio",
    "wav": "audio",
    "mask": "mask",
    "masks": "mask",
}
# Words that make a media-named parameter something else: a count, a size, an embedding, a rate.
_NOT_MEDIA_WORDS = {
    "num",
    "per",
    "embeds",
    "embeddings",
    "embed",
    "latents",
    "latent",
    "scale",
    "strength",
    "size",
    "height",
    "width",
    "rate",
    "sampling",
    "kwargs",
    "attention",
    "guidance",
    "steps",
    "id",
    "ids",
    "index",
    "type",
    "in",
    "s",
    "fps",
    "processor",
    "encoder",
    "length",
    "len",
    "seq",
    "max",
    "min",
    "start",
    "end",
    "ratio",
    "mode",
    "interpolation",
    "noise",
    "tokens",
    "token",
    "grid",
}
_RESOLUTION_SIZE_WORDS = {"image", "output", "video", "target", "sample", "frame"}
_FRAME_NAMES = {"video_length", "frame_num", "num_frame", "nframes", "length_frames"}
_DURATION_WORDS = {"duration", "seconds", "secs", "sec"}
_STEP_WORDS = {"inference", "num", "sample", "sampling", "denoising", "diffusion"}


def guess_role(
    name: str, annotation: str | None, default: Any = _NO_VALUE
) -> tuple[str | None, str | None]:
    """(role, inputKind) of a call parameter from its name's words, annotation and default."""
    words = [w for w in re.split(r"_+|(?<=[a-z])(?=[A-Z])", name.lower()) if w]
    word_set = set(words)
    ann = annotation or ""
    media_type = bool(_MEDIA_TYPES.search(ann))
    scalar = bool(_SCALAR_TYPES.match(ann.strip())) if ann else False
    if not scalar and default is not _NO_VALUE and default is not None:
        scalar = isinstance(default, bool | int | float | str)
    kind = _input_kind(words, ann)
    # 1. file inputs: a media annotation, or a media word in the name that is not a count/size
    derived = word_set & {"embeds", "embeddings", "latents", "latent", "grid"}
    if ("PipelineImageInput" in ann or "PipelineVideoInput" in ann) and not derived:
        return "input", kind or ("video" if "Video" in ann else "image")
    if kind and not (word_set & _NOT_MEDIA_WORDS) and not scalar and (media_type or not ann):
        return "input", kind
    if media_type and not scalar:
        return None, None  # a tensor that is not a media input (latents, embeddings)
    if re.match(r"^(?:bool|Optional\[bool\])(?:\s*\|\s*None)?$", ann.strip()) or isinstance(
        default, bool
    ):
        return None, None  # a switch (use_resolution_binning), not a size or a count
    # 2. scalars by their words
    if (
        word_set & _DURATION_WORDS
        or name.endswith("_in_s")
        or (words[-1:] == ["s"] and word_set & {"length", "end", "time", "audio"})
    ):
        return "duration", None
    if (
        "frames" in word_set
        or name in _FRAME_NAMES
        or ("frame" in word_set and word_set & {"num", "n", "count"})
    ):
        return "frames", None
    last = words[-1] if words else ""
    if (
        word_set & {"height", "width", "resolution"} and last not in {"scale", "ratio", "factor"}
    ) or (last == "size" and (len(words) == 1 or words[-2] in _RESOLUTION_SIZE_WORDS)):
        return "resolution", None
    if last == "steps" and (len(words) == 1 or words[-2] in _STEP_WORDS):
        return "steps", None
    if word_set & {"guidance", "cfg"} and (
        last in {"scale", "rescale", "cfg"} or (last.isdigit() and "scale" in word_set)
    ):
        return "guidance", None
    return None, None


def _input_kind(words: list[str], ann: str) -> str | None:
    kinds = [_MEDIA_WORDS[w] for w in words if w in _MEDIA_WORDS]
    if "mask" in kinds:
        return "mask"
    if kinds:
        return kinds[-1]
    if "Video" in ann:
        return "video"
    if "Audio" in ann:
        return "audio"
    if "Image" in ann or "PIL" in ann:
        return "image"
    return None


# --- checks: conditions that raise ------------------------------------------------------------


def _checks(
    ctx: ClassCtx, mod: Module, fn: Func, names: set[str], switches: set[str]
) -> list[CallCheck]:
    out: list[CallCheck] = []
    _scan(fn, {n: n for n in names}, switches, str(mod.path), "__call__", out)
    # `self.check_inputs(prompt, height, ...)`-style checkers, arguments bound to their parameters
    for node in walk_local(fn):
        if len(out) >= MAX_CHECKS:
            break
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "self"
        ):
            continue
        method = node.func.attr
        if not method.startswith(("check", "validate", "_check", "_validate")):
            continue
        member = ctx.methods.get(method)
        if member is None:
            continue
        binding = _bind(member.fn, node, names)
        if binding:
            _scan(member.fn, binding, switches, str(member.mod.path), method, out)
    return out[:MAX_CHECKS]


def _bind(fn: Func, call: ast.Call, names: set[str]) -> dict[str, str]:
    """Checker parameter -> call parameter, for arguments that are a call parameter unchanged."""
    a = fn.args
    positional = [p.arg for p in [*a.posonlyargs, *a.args]][1:]  # without self
    out: dict[str, str] = {}
    for param, arg in zip(positional, call.args, strict=False):
        if isinstance(arg, ast.Name) and arg.id in names:
            out[param] = arg.id
    accepted = set(positional) | {p.arg for p in a.kwonlyargs}
    for kw in call.keywords:
        value = kw.value
        if kw.arg and kw.arg in accepted and isinstance(value, ast.Name) and value.id in names:
            out[kw.arg] = value.id
    return out


def _scan(
    fn: Func,
    binding: dict[str, str],
    switches: set[str],
    path: str,
    method: str,
    out: list[CallCheck],
) -> None:
    """`if` statements of `fn` whose condition reads a bound parameter and whose body raises."""
    for node in walk_local(fn):
        if len(out) >= MAX_CHECKS:
            return
        if not isinstance(node, ast.If):
            continue
        read = [n.id for n in walk_local(node.test) if isinstance(n, ast.Name)]
        params = tuple(dict.fromkeys(binding[n] for n in read if n in binding))
        if not params:
            continue
        raised = _first_raise(node.body)
        if raised is None:
            continue
        avoid: dict[str, Any] | None = None
        test = node.test
        if isinstance(test, ast.Name) and binding.get(test.id) in switches:
            avoid = {binding[test.id]: False}
        elif (
            isinstance(test, ast.UnaryOp)
            and isinstance(test.op, ast.Not)
            and isinstance(test.operand, ast.Name)
            and binding.get(test.operand.id) in switches
        ):
            avoid = {binding[test.operand.id]: True}
        if any(c.line == node.lineno and c.path == path for c in out):
            continue
        out.append(
            CallCheck(
                params=params,
                condition=short_text(test, 120),
                message=_raise_message(raised),
                path=path,
                line=node.lineno,
                method=method,
                avoid=avoid,
            )
        )


def _first_raise(body: list[ast.stmt]) -> ast.Raise | None:
    for stmt in body:
        for node in walk_local(stmt):
            if isinstance(node, ast.Raise):
                return node
    return None


def _raise_message(node: ast.Raise) -> str | None:
    exc = node.exc
    if not isinstance(exc, ast.Call) or not exc.args:
        return short_text(exc, 120) if exc is not None else None
    first = exc.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        text = first.value
    elif isinstance(first, ast.JoinedStr):
        parts = []
        for v in first.values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                parts.append(v.value)
            elif isinstance(v, ast.FormattedValue):
                parts.append("{" + short_text(v.value, 40) + "}")
        text = "".join(parts)
    else:
        text = short_text(first, 120)
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:197] + "..."
