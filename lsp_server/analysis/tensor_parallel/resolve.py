"""Name resolution for the interpreter: a name used in a module -> class, function, constant or an
external dotted name, following imports across files with `sources.module_path`/`read_source`
(parsed files are cached there). External packages (torch, einops, kernels) are never read."""

from __future__ import annotations

import ast
from typing import Any

from ..model import AnalysisError
from ..sources import SourceFile, module_path, qualified, read_source
from .values import DictLit, Ref, Scalar

BUILTINS = frozenset(
    {
        "len", "hasattr", "getattr", "isinstance", "issubclass", "int", "float", "bool", "str",
        "min", "max", "tuple", "list", "range", "enumerate", "zip", "super", "print", "abs",
        "sum", "any", "all", "dict", "set", "sorted", "reversed", "round", "type", "iter", "next",
        "callable", "setattr", "id", "repr", "divmod", "pow", "map", "filter", "object",
        "NotImplementedError", "ValueError", "RuntimeError", "TypeError", "KeyError",
        "AssertionError",
    }
)  # fmt: skip
# Packages whose sources are never read: their names are vocabulary (torch.nn.Linear, F.gelu,
# einops.rearrange) or kernels reported as DTensor-unsafe.
EXTERNAL_ROOTS = frozenset(
    {
        "torch", "numpy", "np", "einops", "math", "functools", "typing", "inspect", "flash_attn",
        "triton", "apex", "liger_kernel", "xformers", "warnings", "logging", "os", "itertools",
        "collections", "dataclasses", "packaging", "importlib", "transformers", "accelerate",
        "safetensors", "flash_attn_interface", "sageattention", "torch_npu", "torch_xla",
    }
)  # fmt: skip
_MAX_HOPS = 6


class Names:
    """Resolves names for one analysis; results are cached per (file, name)."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, str], Any] = {}
        self._modules: dict[str, SourceFile | None] = {}

    def qualified(self, source: SourceFile, name: str) -> str:
        return qualified(source, name)

    def lookup(self, source: SourceFile, name: str, hops: int = 0) -> Any:
        """A top-level name of `source`: Ref, Scalar (a literal constant) or None."""
        key = (id(source), name)
        if key in self._cache:
            return self._cache[key]
        self._cache[key] = None  # cycle guard
        value = self._lookup(source, name, hops)
        self._cache[key] = value
        return value

    def _lookup(self, source: SourceFile, name: str, hops: int) -> Any:
        if hops > _MAX_HOPS:
            return None
        stmt = source.top_level.get(name)
        prefix = source.dotted_name or source.path.stem
        if isinstance(stmt, ast.ClassDef):
            return Ref("class", f"{prefix}.{name}", stmt, source)
        if isinstance(stmt, ast.FunctionDef):
            return Ref("func", f"{prefix}.{name}", stmt, source)
        if isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
            value = stmt.value
            if isinstance(value, ast.Constant):
                return Scalar(value.value)
            if isinstance(value, ast.Name) and value.id != name:
                return self.lookup(source, value.id, hops + 1)
            if isinstance(value, ast.Attribute):
                return self.attribute_chain(source, value, hops + 1)
            if isinstance(value, ast.Dict) and len(value.keys) <= 32:
                return DictLit(source, value)
            return None
        imp = source.imports.get(name)
        if imp is not None:
            return self._imported(source, name, imp, hops)
        if name in BUILTINS:
            return Ref("builtin", name)
        return None

    def _imported(
        self, source: SourceFile, name: str, imp: tuple[str, int, str | None], hops: int
    ) -> Any:
        module, level, attr = imp
        qual = qualified(source, name)
        if not level and module.split(".")[0] in EXTERNAL_ROOTS:
            return Ref("ext", qual)
        if attr is None:  # import package.module [as alias]
            target = self.module_source(module, level, source)
            return Ref("module", qual, None, target) if target else Ref("ext", qual)
        sub = self.module_source(f"{module}.{attr}" if module else attr, level, source)
        if sub is not None:
            return Ref("module", qual, None, sub)
        target = self.module_source(module, level, source)
        if target is None or target is source:
            return Ref("ext", qual)
        found = self.lookup(target, attr, hops + 1)
        return found if found is not None else Ref("ext", qual)

    def defining_file_size(self, source: SourceFile, name: str) -> int | None:
        """Size in bytes of the file an imported name comes from (no parse), None if unknown."""
        imp = source.imports.get(name)
        if imp is None:
            return None
        module, level, _ = imp
        path = module_path(module, level, source.path) if module or level else None
        try:
            return path.stat().st_size if path is not None else None
        except OSError:
            return None

    def module_source(self, module: str, level: int, importer: SourceFile) -> SourceFile | None:
        key = f"{importer.path}|{level}|{module}"
        if key in self._modules:
            return self._modules[key]
        found: SourceFile | None = None
        if level or module.split(".")[0] not in EXTERNAL_ROOTS:
            path = module_path(module, level, importer.path)
            if path is not None:
                try:
                    found = read_source(path, lazy=True)  # definitions parsed on demand
                except AnalysisError:
                    found = None
        self._modules[key] = found
        return found

    def attribute_chain(self, source: SourceFile, node: ast.expr, hops: int = 0) -> Any:
        """`nn.Linear`, `attention_processor.Attention` -> Ref (no file read for externals)."""
        if isinstance(node, ast.Name):
            return self.lookup(source, node.id, hops)
        if isinstance(node, ast.Attribute):
            base = self.attribute_chain(source, node.value, hops)
            return self.member(base, node.attr, hops)
        return None

    def member(self, base: Any, attr: str, hops: int = 0) -> Any:
        if isinstance(base, Ref):
            if base.kind == "ext":
                return Ref("ext", f"{base.qualname}.{attr}")
            if base.kind == "module" and base.source is not None:
                found = self.lookup(base.source, attr, hops + 1)
                return found if found is not None else Ref("ext", f"{base.qualname}.{attr}")
        return None

    def import_local(self, source: SourceFile, stmt: ast.ImportFrom | ast.Import) -> dict[str, Any]:
        """Names bound by an import statement inside a function body."""
        out: dict[str, Any] = {}
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                local = alias.asname or alias.name.split(".")[0]
                full = alias.name if alias.asname else local
                out[local] = Ref("ext", full)
            return out
        module = stmt.module or ""
        for alias in stmt.names:
            local = alias.asname or alias.name
            if not stmt.level and module.split(".")[0] in EXTERNAL_ROOTS:
                out[local] = Ref("ext", f"{module}.{alias.name}")
                continue
            target = self.module_source(module, stmt.level, source)
            found = self.lookup(target, alias.name) if target is not None else None
            out[local] = found if found is not None else Ref("ext", f"{module}.{alias.name}")
        return out
