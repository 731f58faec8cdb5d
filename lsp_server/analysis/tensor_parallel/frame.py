"""The interpreter's call frame: local variables, the receiver, the module an attention call
belongs to, the module being built, and the collected return values."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..sources import SourceFile
from .values import join

MAX_DEPTH = 16


@dataclass
class Frame:
    env: dict[str, Any]
    source: SourceFile
    receiver: Any = None
    owner: Any = None  # the module an attention call inside this frame belongs to
    building: Any = None  # the Node whose __init__ runs
    cls: Any = None  # ClassRef defining the running function (for super())
    returns: list = field(default_factory=list)
    dead: bool = False

    def fork(self) -> Frame:
        return Frame(
            dict(self.env),
            self.source,
            self.receiver,
            self.owner,
            self.building,
            self.cls,
            self.returns,
        )


def join_env(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Variables after two branches: each one may hold either branch's value."""
    out = dict(a)
    for key, value in b.items():
        old = out.get(key)
        out[key] = value if old is None else join(old, value)
    return out
