"""What the context- and tensor-parallel inference receive from the block-list analysis."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from .resolver import Resolver
from .sources import ClassRef, SourceFile

DEFAULT_PARALLEL_SIZES = (2, 4, 8)


@dataclass(frozen=True)
class ParallelBlockList:
    """A block list of the transformer, cached (`blockLists`) or not (`otherBlockLists`)."""

    attr: str
    block: ClassRef
    elements: tuple[ClassRef, ...]
    cached: bool
    count: int | None
    # the loops over this list, in forward or its helpers (a `while`: a counter loop)
    loops: tuple[ast.For | ast.While, ...]
    call: ast.Call | None  # the block call the loop makes (not the checkpointing one)
    # (message, line) of loops that do not run the blocks once each, first to last (reversed,
    # a block called twice, an early exit): the hook plan's first and last block are not the
    # first and last to run
    run_order: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class ParallelContext:
    resolver: Resolver
    source: SourceFile
    transformer: ClassRef
    forward: ast.FunctionDef | None
    init: ast.FunctionDef | None
    block_lists: tuple[ParallelBlockList, ...]
    is_diffusers: bool
    config: dict[str, Any] | None
    cp_sizes: tuple[int, ...]
    tp_sizes: tuple[int, ...]
    pipeline: SourceFile | None
    model_index: dict[str, Any] | None

    @property
    def path(self) -> str:
        return str(self.source.path)

    @property
    def cached_lists(self) -> tuple[ParallelBlockList, ...]:
        return tuple(b for b in self.block_lists if b.cached)
