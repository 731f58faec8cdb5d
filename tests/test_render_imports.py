"""`imports.import_block`: the import block of a generated module, one test per rule."""

from __future__ import annotations

from render_cases import assert_code, code

from lsp_server.codegen.imports import import_block


def test_sections_are_future_stdlib_third_party_then_relative() -> None:
    lines = [
        "from .functor_base import PatchFunctor",
        "import torch",
        "from typing import Any",
        "from __future__ import annotations",
        "import copy",
        "from cache_dit import BlockAdapter",
    ]
    assert_code(
        import_block(lines, width=79),
        code(
            """
            from __future__ import annotations

            import copy
            from typing import Any

            import torch
            from cache_dit import BlockAdapter

            from .functor_base import PatchFunctor
            """
        ),
    )


def test_names_from_one_module_are_merged_and_deduplicated() -> None:
    lines = [
        "from cache_dit import ForwardPattern",
        "from cache_dit import BlockAdapter, ForwardPattern",
    ]
    assert import_block(lines, width=79) == "from cache_dit import BlockAdapter, ForwardPattern\n"


def test_names_are_ordered_constants_classes_functions() -> None:
    lines = ["from .register import register_all, Planner, CONSTANT, apply_plan"]
    assert import_block(lines, width=79) == (
        "from .register import CONSTANT, Planner, apply_plan, register_all\n"
    )


def test_a_line_over_the_width_takes_one_name_per_line() -> None:
    one = "from torch.distributed.tensor.parallel import RowwiseParallel, ColwiseParallel"
    assert import_block([one], width=79) == (
        "from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel\n"
    )
    more = "from torch.distributed.tensor.parallel import parallelize_module"
    assert_code(
        import_block([one, more], width=79),
        code(
            """
            from torch.distributed.tensor.parallel import (
                ColwiseParallel,
                RowwiseParallel,
                parallelize_module,
            )
            """
        ),
    )


def test_plain_and_aliased_imports_are_kept() -> None:
    lines = ["import torch.nn.functional as F", "import numpy as np", "import os, sys"]
    assert_code(
        import_block(lines, width=79),
        code(
            """
            import os
            import sys

            import numpy as np
            import torch.nn.functional as F
            """
        ),
    )


def test_aliased_names_sort_by_the_imported_name() -> None:
    lines = ["from .outputs import AcmeOutput as Output, Base"]
    assert import_block(lines, width=79) == "from .outputs import AcmeOutput as Output, Base\n"


def test_a_block_of_single_line_imports_is_stable() -> None:
    block = import_block(["from typing import Any", "import torch", "from .x import A"], width=79)
    assert import_block(block.splitlines(), width=79) == block
