"""Text-encoder TP (TE-P) and VAE data-parallel (VAE-P) support of a pipeline's components.

Reads `model_index.json` (`{"text_encoder": ["transformers", "T5EncoderModel"], "vae":
["diffusers", "AutoencoderKL"], ...}`) and reports, per component, whether the installed cache-dit
already registers a planner for its class (text encoders: first registered prefix; VAEs: exact
class name - read by `registry_facts.read_registries`, reported only) and, when it does not, what a
new planner could start from: the `base_model_tp_plan` of the encoder's transformers config class,
or the tiled encode/decode helpers of the VAE class (VAE-P distributes tiles). cache-dit only
treats an extra module as a text encoder when it comes from `transformers`, and as a VAE when it
comes from `diffusers.models.autoencoders`.

Public API: `component_support(model_index) -> (json dict | None, [(severity, message)])`.
Files are located without importing anything (`importlib.util.find_spec` of top-level packages).
"""

from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from .registry_facts import read_registries

_TILING_MARKERS = ("tiled_decode", "_tiled_encode", "tiled_encode", "blend_v", "blend_h")


@lru_cache(maxsize=4)
def _package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


@lru_cache(maxsize=64)
def _transformers_class(class_name: str) -> tuple[str | None, bool | None]:
    """(modeling file, whether its config has `base_model_tp_plan`) of a transformers class."""
    root = _package_dir("transformers")
    if root is None or not (root / "models").is_dir():
        return None, None
    wanted = _squash(class_name)
    candidates = sorted(
        (
            d
            for d in (root / "models").iterdir()
            if d.is_dir() and wanted.startswith(_squash(d.name))
        ),
        key=lambda d: -len(_squash(d.name)),
    )
    pattern = re.compile(rf"^class {re.escape(class_name)}\(", re.M)
    for folder in candidates:
        for modeling in sorted(folder.glob("modeling_*.py")):
            try:
                text = modeling.read_text(encoding="utf-8")
            except OSError:
                continue
            if not pattern.search(text):
                continue
            plan = False
            for config in folder.glob("configuration_*.py"):
                try:
                    plan = plan or "base_model_tp_plan" in config.read_text(encoding="utf-8")
                except OSError:
                    continue
            return str(modeling), plan
    return None, None


@lru_cache(maxsize=64)
def _vae_tiling(class_name: str) -> tuple[str | None, bool | None]:
    """(source file, whether it has tiled encode/decode helpers) for a diffusers VAE class."""
    root = _package_dir("diffusers")
    folder = root / "models" / "autoencoders" if root else None
    if folder is None or not folder.is_dir():
        return None, None
    pattern = re.compile(rf"^class {re.escape(class_name)}\(", re.M)
    for path in sorted(folder.glob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        match = pattern.search(text)
        if match is None:
            continue
        body = text[match.start() :]
        following = re.search(r"^class \w+", body[1:], re.M)
        body = body[: following.start() + 1] if following else body
        return str(path), any(marker in body for marker in _TILING_MARKERS)
    return None, None


def _entries(model_index: dict[str, Any]) -> list[tuple[str, str, str]]:
    out = []
    for key, value in model_index.items():
        if key.startswith("_") or not isinstance(value, list | tuple) or len(value) != 2:
            continue
        library, cls = value
        if isinstance(library, str) and isinstance(cls, str):
            out.append((key, library, cls))
    return out


def _is_text_encoder(key: str, library: str) -> bool:
    return "text_encoder" in key or ("language" in key and "encoder" in key)


def _is_vae(key: str, cls: str) -> bool:
    return "vae" in key.lower() or cls.startswith("Autoencoder")


def component_support(
    model_index: dict[str, Any] | None,
) -> tuple[dict[str, Any] | None, list[tuple[str, str]]]:
    if not model_index:
        return None, []
    registries = read_registries()
    notes: list[tuple[str, str]] = []
    encoders: list[dict[str, Any]] = []
    vaes: list[dict[str, Any]] = []
    for key, library, cls in _entries(model_index):
        if _is_text_encoder(key, library):
            reg = registries.first_match("text_encoder_tp", cls) if registries.installed else None
            entry: dict[str, Any] = {
                "component": key,
                "library": library,
                "class": cls,
                "supported": reg is not None and library == "transformers",
                "planner": reg.name if reg else None,
            }
            if library != "transformers":
                entry["note"] = (
                    "not a transformers class: cache-dit's enable_parallelism does not treat it "
                    "as a text encoder (TE-P skipped)"
                )
            elif reg is None:
                source, has_plan = _transformers_class(cls)
                entry["source"] = source
                entry["baseModelTpPlan"] = has_plan
                entry["note"] = "needs a new TextEncoderTensorParallelismPlanner" + (
                    "; mirror the config's base_model_tp_plan (q/k/v/gate/up colwise, "
                    "o/down rowwise)"
                    if has_plan
                    else "; its config has no base_model_tp_plan: write the plan by hand"
                )
                notes.append(("info", f"text encoder `{key}` ({cls}): {entry['note']}"))
            encoders.append(entry)
        elif _is_vae(key, cls):
            reg = registries.first_match("vae_dp", cls) if registries.installed else None
            entry = {
                "component": key,
                "library": library,
                "class": cls,
                "supported": reg is not None and library == "diffusers",
                "planner": reg.name if reg else None,
            }
            if reg is None:
                source, tiling = _vae_tiling(cls) if library == "diffusers" else (None, None)
                entry["source"] = source
                entry["tilingApi"] = tiling
                entry["note"] = (
                    "needs a new AutoEncoderDataParallelismPlanner (exact class name)"
                    + (
                        "; it has tiled encode/decode helpers to distribute"
                        if tiling
                        else "; no tiled encode/decode helpers found: VAE-P is not feasible "
                        "without tiling support"
                    )
                )
                notes.append(("info", f"VAE `{key}` ({cls}): {entry['note']}"))
            vaes.append(entry)
    result = {
        "cacheDitVersion": registries.cache_dit_version,
        "textEncoders": encoders,
        "vaes": vaes,
    }
    return result, notes
