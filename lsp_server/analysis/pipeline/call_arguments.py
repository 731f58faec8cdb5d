"""How the user calls the pipeline, for decisions that depend on it (`has_separate_cfg` of a
pipeline whose unconditional call runs only with a negative prompt and a guidance scale above 1).

The same facts a verification request carries: its keyword arguments (`extraCallKwargs`, JSON
values) and the inputs it passes from files (`inputs`: tensors, images; not None, their values
unknown to a static reading).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .values import GIVEN

_CONSTANTS = (bool, int, float, str)


@dataclass(frozen=True)
class PipelineCall:
    """The pipeline's call: keyword arguments (JSON values) and the names of inputs passed."""

    arguments: Mapping[str, Any] = field(default_factory=dict)
    inputs: tuple[str, ...] = ()

    def values(self) -> dict[str, object]:
        """Name -> the value the reading uses: a constant, or `GIVEN` (a list, an object, an
        input from a file: passed, not None)."""
        out: dict[str, object] = {
            name: value if value is None or isinstance(value, _CONSTANTS) else GIVEN
            for name, value in self.arguments.items()
        }
        for name in self.inputs:
            out[name] = GIVEN
        return out
