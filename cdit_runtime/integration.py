"""The integration under test: a generated standalone module or cache-dit's own registries.

Standalone module interface (what `lsp_server/codegen` emits): ``TRANSFORMER_CLASS: str``,
``block_adapter(pipe, **kwargs)``, ``cp_plan(transformer) -> dict`` and
``enable(pipe, *, cache_config=None, parallelism_config=None, transformer=None)``, which builds the
BlockAdapter and planners and calls ``cache_dit.enable_cache``. The module is imported from its
file (trusted workspace only). "cache-dit-checkout": ``cache_dit.enable_cache(pipe, ...)`` with
the adapters and planners registered in the installed cache-dit, or in a checkout whose ``src`` is
put first on ``sys.path`` before cache-dit is imported (`use_checkout`).

`git_revision` runs in the controller (no torch); the rest runs in the workers.
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from .contract import Integration
from .errors import RunFailure

__all__ = ["LoadedIntegration", "git_revision", "load_integration", "use_checkout"]

REQUIRED = ("TRANSFORMER_CLASS", "block_adapter", "cp_plan", "enable")


def checkout_src(path: str) -> Path:
    root = Path(path).expanduser().resolve()
    return root / "src" if (root / "src" / "cache_dit").is_dir() else root


def use_checkout(integration: Integration) -> None:
    """Put a cache-dit checkout first on ``sys.path``; call before anything imports cache_dit."""
    if integration.kind != "cache-dit-checkout" or not integration.path:
        return
    src = checkout_src(integration.path)
    if not (src / "cache_dit").is_dir():
        raise RunFailure("INTEGRATION", f"{integration.path} is not a cache-dit checkout")
    if "cache_dit" in sys.modules:
        raise RunFailure("INTEGRATION", "cache_dit was imported before the checkout was selected")
    sys.path.insert(0, str(src))


@dataclass
class LoadedIntegration:
    kind: str
    module: ModuleType | None = None

    @property
    def transformer_class(self) -> str | None:
        return getattr(self.module, "TRANSFORMER_CLASS", None) if self.module else None

    def enable(self, pipe: Any, cache_config: Any, parallelism_config: Any) -> Any:
        """Apply cache and/or parallelism to ``pipe`` (in place) through cache-dit's public API."""
        if cache_config is None and parallelism_config is None:
            return pipe
        if self.module is not None:
            result = self.module.enable(
                pipe, cache_config=cache_config, parallelism_config=parallelism_config
            )
            return pipe if result is None else result
        import cache_dit

        return cache_dit.enable_cache(
            pipe, cache_config=cache_config, parallelism_config=parallelism_config
        )


def load_integration(spec: Integration) -> LoadedIntegration:
    """Import the standalone module (checked for the interface) or select the registries."""
    if spec.kind == "cache-dit-checkout":
        if spec.path:
            import cache_dit

            src = checkout_src(spec.path)
            if not Path(cache_dit.__file__).resolve().is_relative_to(src):
                raise RunFailure(
                    "INTEGRATION",
                    f"cache_dit was imported from {cache_dit.__file__}, not from {src}",
                )
        return LoadedIntegration("cache-dit-checkout")
    path = Path(spec.path or "").expanduser().resolve()
    if not path.is_file():
        raise RunFailure(
            "BAD_REQUEST",
            f"integration module {path} does not exist or is not a file",
            "Check the path of the standalone module (`cdit-integrate generate` writes it).",
        )
    name = "cdit_integration_" + hashlib.sha1(str(path).encode()).hexdigest()[:10]
    if name in sys.modules:
        return LoadedIntegration("standalone", sys.modules[name])
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise RunFailure("INTEGRATION", f"cannot import {path}")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise RunFailure("INTEGRATION", f"importing {path} failed: {exc}") from exc
    missing = [attr for attr in REQUIRED if not hasattr(module, attr)]
    if missing:
        raise RunFailure(
            "INTEGRATION",
            f"{path} lacks {missing}",
            "A standalone integration module defines TRANSFORMER_CLASS, block_adapter, cp_plan "
            "and enable (regenerate it with `cdit-integrate generate`).",
        )
    return LoadedIntegration("standalone", module)


def git_revision(path: str | None) -> tuple[str | None, bool | None]:
    """(HEAD sha, dirty) of the repository holding ``path``; dirty covers ``path`` only."""
    if not path:
        return None, None
    target = Path(path).expanduser().resolve()
    folder = target if target.is_dir() else target.parent

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", "-C", str(folder), *args],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    if sha is None or git("check-ignore", "-q", str(target)) is not None:
        return None, None  # not in a repository, or an ignored path (e.g. a virtualenv)
    status = git("status", "--porcelain", "--", str(target))
    return sha, bool(status) if status is not None else None
