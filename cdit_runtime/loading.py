"""Load the pipeline: local path, tiny build or shrunk transformer; third-party classes from files.

Runs in the worker processes (imports torch and diffusers). User source files are imported here
(the runtime is only started in a trusted workspace; the language server never imports them). A
component whose library in ``model_index.json`` is not diffusers/transformers is looked up in
``sys.modules`` by diffusers, so every source file is imported under its module name and, when
it defines a class that ``model_index.json`` names, also under the library name recorded there.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from .contract import ModelSource
from .errors import RunFailure
from .shrink import shrink_config

__all__ = ["check_sources", "import_sources", "is_module_name", "load_pipeline", "model_dir"]

_KNOWN_LIBRARIES = {"diffusers", "transformers", "onnxruntime", "flax"}


def model_dir(source: ModelSource, output_dir: str) -> Path:
    """Directory the pipeline is loaded from (tiny builds default to ``<outputDir>/model-<f>``)."""
    if source.path:
        return Path(source.path).expanduser().resolve()
    return Path(output_dir).resolve() / f"model-{source.family}"


_MODULE_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def is_module_name(source: str) -> bool:
    """Whether a source entry is a dotted module name (`diffusers.models.transformers.x`) rather
    than a file: no path separator, no `.py`, and no such file."""
    if not _MODULE_NAME.match(source) or source.endswith(".py"):
        return False
    try:
        return not Path(source).expanduser().exists()
    except (OSError, ValueError):  # a name the file system refuses is no file
        return True


def import_sources(paths: list[str]) -> list[ModuleType]:
    """Import user source files (modules or package folders) so their classes can be loaded.

    An entry may also be a dotted module name, imported as it is (an installed module)."""
    modules = []
    for raw in paths:
        if is_module_name(raw):
            try:
                modules.append(importlib.import_module(raw))
            except Exception as exc:
                raise RunFailure("MODEL_LOAD", f"importing module `{raw}` failed: {exc}") from exc
            continue
        path = Path(raw).expanduser().resolve()
        if not path.exists():
            raise RunFailure("MODEL_LOAD", f"source file {path} does not exist")
        target = path.parent if path.name == "__init__.py" else path
        # Climb out of packages so relative imports inside the file keep working.
        parts = [target.stem if target.is_file() else target.name]
        root = target.parent
        while (root / "__init__.py").is_file():
            parts.insert(0, root.name)
            root = root.parent
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
        name = ".".join(parts)
        try:
            modules.append(importlib.import_module(name))
        except Exception as exc:
            raise RunFailure(
                "MODEL_LOAD", f"importing source file {path} as `{name}` failed: {exc}"
            ) from exc
    return modules


def check_sources(paths: list[str]) -> list[dict[str, Any]]:
    """Import each source in turn as a run does (`import_sources`, in this order, one process);
    for each: whether it imported, its module and the classes it defines, or the error."""
    results: list[dict[str, Any]] = []
    for raw in paths:
        entry: dict[str, Any] = {"source": raw}
        try:
            (module,) = import_sources([raw])
        except RunFailure as exc:
            cause = exc.__cause__
            entry.update(
                ok=False,
                message=str(exc),
                error=str(cause) if cause is not None else str(exc),
                errorType=type(cause).__name__ if cause is not None else "RunFailure",
            )
        except BaseException as exc:  # SystemExit or KeyboardInterrupt raised by the module
            entry.update(ok=False, message=str(exc), error=str(exc), errorType=type(exc).__name__)
        else:
            classes = [
                name
                for name, value in sorted(vars(module).items())
                if isinstance(value, type) and value.__module__ == module.__name__
            ]
            entry.update(
                ok=True,
                module=module.__name__,
                file=getattr(module, "__file__", None),
                classes=classes[:500],
            )
        results.append(entry)
    return results


def _read_index(path: Path) -> dict[str, Any]:
    index = path / "model_index.json"
    if not index.is_file():
        raise RunFailure("NO_MODEL_INDEX", f"{path} has no model_index.json")
    return json.loads(index.read_text())


def _alias_libraries(index: dict[str, Any], modules: list[ModuleType]) -> None:
    """Make `sys.modules[<library>]` resolve for third-party components defined in ``modules``."""
    for key, value in index.items():
        if key.startswith("_") or not isinstance(value, list) or len(value) != 2:
            continue
        library, class_name = value
        if not library or library in _KNOWN_LIBRARIES or library in sys.modules:
            continue
        for module in modules:
            if hasattr(module, class_name):
                sys.modules[library] = module
                break


def _defined_in_sources(name: str, modules: list[ModuleType]) -> type | None:
    """The class ``name`` as a source file defines it (not one it imports), else None."""
    for module in modules:
        value = getattr(module, name, None)
        if isinstance(value, type) and value.__module__ == module.__name__:
            return value
    return None


def _resolve_class(name: str, library: str | None, modules: list[ModuleType]) -> type:
    defined = _defined_in_sources(name, modules)
    if defined is not None:
        return defined
    for module in modules:
        if hasattr(module, name):
            return getattr(module, name)
    for lib in [library, "diffusers", "transformers"]:
        if not lib:
            continue
        try:
            module = sys.modules.get(lib) or importlib.import_module(lib)
        except ImportError:
            continue
        if hasattr(module, name):
            return getattr(module, name)
    raise RunFailure(
        "MODEL_LOAD",
        f"class {name} not found in diffusers, transformers or the source files",
        "Add the file that defines it to the model's source files.",
    )


def _pipeline_class(name: str, index: dict[str, Any], modules: list[ModuleType]) -> type:
    """The pipeline class: from the source files, diffusers or transformers, else from a library
    the index names for one of its components (a custom pipeline usually ships its own
    components in the same module, e.g. `cdit_runtime.skimage_pipeline`)."""
    try:
        return _resolve_class(name, None, modules)
    except RunFailure:
        libraries = [
            v[0]
            for k, v in index.items()
            if not k.startswith("_") and isinstance(v, list) and len(v) == 2 and v[0]
        ]
        for library in dict.fromkeys(libraries):
            if library in _KNOWN_LIBRARIES:
                continue
            try:
                module = importlib.import_module(library)
            except ImportError:
                continue
            if isinstance(getattr(module, name, None), type):
                return getattr(module, name)
        raise


def load_pipeline(
    source: ModelSource, output_dir: str, torch_dtype: Any, *, seed: int = 0
) -> tuple[Any, dict[str, Any]]:
    """Load the pipeline on CPU; returns it and a description (path, classes, sizes)."""
    path = model_dir(source, output_dir)
    modules = import_sources(source.source_files)
    if not path.is_dir():
        raise RunFailure("MODEL_LOAD", f"model path {path} is not a directory")
    index = _read_index(path)
    _alias_libraries(index, modules)
    pipeline_name = source.pipeline_class or index.get("_class_name")
    if not pipeline_name:
        raise RunFailure("MODEL_LOAD", f"{path}/model_index.json names no _class_name")
    pipeline_cls = _pipeline_class(pipeline_name, index, modules)

    overrides: dict[str, Any] = {}
    shrunk: dict[str, Any] = {}
    from_sources: dict[str, str] = {}
    for name, value in index.items():
        if name.startswith("_") or not isinstance(value, list) or len(value) != 2:
            continue
        library, class_name = value
        if not library or not class_name:
            continue
        if source.source == "shrink" and name.startswith("transformer"):
            cls = _resolve_class(class_name, library, modules)
            model, config = _shrunk_model(cls, path / name, source, torch_dtype, seed)
            overrides[name] = model
            shrunk[name] = config
        elif _needs_manual_load(library, class_name, modules):
            cls = _resolve_class(class_name, library, modules)
            overrides[name] = _manual_load(cls, path / name, torch_dtype)
        elif library in _KNOWN_LIBRARIES:
            # a copy of a library class in the source files (the model's code the user edits)
            # is what runs, not the installed class of the same name the index names
            copy = _defined_in_sources(class_name, modules)
            if copy is not None and not _is_library_class(copy, library, class_name):
                overrides[name] = _load_component(copy, path, name, torch_dtype)
                from_sources[name] = f"{copy.__module__}.{copy.__qualname__}"

    import torch

    try:
        pipe = pipeline_cls.from_pretrained(str(path), torch_dtype=torch_dtype, **overrides)
    except RunFailure:
        raise
    except (torch.OutOfMemoryError, MemoryError):
        raise
    except Exception as exc:
        raise RunFailure("MODEL_LOAD", f"{pipeline_name}.from_pretrained({path}): {exc}") from exc
    transformer = getattr(pipe, "transformer", None)
    info = {
        "path": str(path),
        "pipelineClass": type(pipe).__name__,
        "transformerClass": type(transformer).__name__ if transformer is not None else None,
        "transformerParameters": (
            sum(p.numel() for p in transformer.parameters()) if transformer is not None else None
        ),
        "source": source.source,
        "shrunkConfigs": shrunk or None,
        "componentsFromSources": from_sources or None,
    }
    return pipe, info


def _is_library_class(cls: type, library: str, name: str) -> bool:
    """Whether ``cls`` is the library's own class (a source given as its dotted module name)."""
    try:
        module = sys.modules.get(library) or importlib.import_module(library)
    except ImportError:
        return False
    return getattr(module, name, None) is cls


def _load_component(cls: type, path: Path, name: str, torch_dtype: Any) -> Any:
    """``cls.from_pretrained`` of the component folder ``path/name`` (models get the dtype)."""
    import torch

    kwargs: dict[str, Any] = {"subfolder": name}
    if issubclass(cls, torch.nn.Module):
        kwargs["torch_dtype"] = torch_dtype
    try:
        return cls.from_pretrained(str(path), **kwargs)  # type: ignore[attr-defined]
    except (torch.OutOfMemoryError, MemoryError):
        raise
    except Exception as exc:
        raise RunFailure(
            "MODEL_LOAD",
            f"{cls.__module__}.{cls.__qualname__}.from_pretrained({path}/{name}): {exc}",
            "The source file's copy of the class must load the model folder's weights.",
        ) from exc


def _needs_manual_load(library: str, class_name: str, modules: list[ModuleType]) -> bool:
    """diffusers cannot load `_keep_in_fp32_modules` models without accelerate (e.g. Wan)."""
    if library in ("transformers", None):
        return False
    try:
        from diffusers.utils import is_accelerate_available
    except ImportError:
        return False
    if is_accelerate_available():
        return False
    try:
        cls = _resolve_class(class_name, library, modules)
    except RunFailure:
        return False
    return bool(getattr(cls, "_keep_in_fp32_modules", None)) and hasattr(cls, "from_config")


def _manual_load(cls: type, folder: Path, torch_dtype: Any) -> Any:
    """Build from ``config.json`` and load the safetensors shards (no accelerate needed)."""
    import torch
    from safetensors.torch import load_file

    model = cls.from_config(cls.load_config(str(folder)))
    state: dict[str, Any] = {}
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise RunFailure("MODEL_LOAD", f"{folder} has no .safetensors weights")
    for file in files:
        state.update(load_file(str(file)))
    model.load_state_dict(state, strict=True)
    model = model.to(torch_dtype)
    keep = list(getattr(cls, "_keep_in_fp32_modules", None) or [])
    if torch_dtype != torch.float32:
        for name, module in model.named_modules():
            if any(part in keep for part in name.split(".")):
                module.to(torch.float32)
    return model.eval()


def _shrunk_model(
    cls: type, folder: Path, source: ModelSource, torch_dtype: Any, seed: int
) -> tuple[Any, dict[str, Any]]:
    import torch

    config = dict(cls.load_config(str(folder)))
    small = shrink_config(config, layers=source.shrink_layers, heads=source.shrink_heads)
    torch.manual_seed(seed)
    try:
        model = cls.from_config(small)
    except Exception as exc:
        raise RunFailure(
            "MODEL_LOAD",
            f"building {cls.__name__} from the shrunk config failed: {exc}",
            "Shrinking keeps interface widths and head_dim; pass the layer/head counts the "
            "model accepts (shrinkLayers, shrinkHeads) or use a local tiny checkpoint.",
        ) from exc
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator, dtype=param.dtype) * 0.05)
    changed = {k: v for k, v in small.items() if config.get(k) != v and not k.startswith("_")}
    return model.to(torch_dtype).eval(), changed
