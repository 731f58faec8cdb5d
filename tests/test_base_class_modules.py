"""Modules a model variant inherits from its base class's `__init__` (`super().__init__(...)`,
then only its blocks rebuilt): the context-parallel reading of forward knows them as modules.

`third_party/variant_dit.py`: `WideVariantDiT`'s rotary module counts positions from the tokens
it is handed, built by the base's `__init__`: the root split is blocked (position drift) and the
stream is split at the first block, the rotary outputs split in place (before: a root split,
every rank counting from 0). `ResidualVariantDiT` adds each block's update to the stream: the
root split gathers at the base's `head` (before: no module after the loop was known, CP
refused). Both plans run on 2 gloo ranks (tests/test_cp_plans_gloo.py: `variant_wide`,
`variant_residual`, with the old root split as the control that fails)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES

VARIANT = FIXTURES / "models" / "third_party" / "variant_dit.py"


def _cp(path: Path, cls: str) -> dict[str, Any]:
    (t,) = analyze_path(path, cls, registry=False).to_json()["transformers"]
    return t["contextParallel"]


def _assert_drift_read(cp: dict[str, Any]) -> None:
    assert cp["approach"] == "single_point"
    assert set(cp["plan"]) == {"blocks.0", "rope", "head"}
    assert [spec["split_dim"] for spec in cp["plan"]["rope"].values()] == [0, 0]
    assert cp["plan"]["head"]["gather_dim"] == 1
    assert any("position drift" in e["message"] for e in cp["evidence"])


def test_a_rotary_module_built_by_the_base_init_blocks_the_root_split() -> None:
    _assert_drift_read(_cp(VARIANT, "WideVariantDiT"))


def test_the_base_head_takes_the_gather_of_a_residual_loop() -> None:
    cp = _cp(VARIANT, "ResidualVariantDiT")
    assert cp["approach"] == "root_split"
    assert set(cp["plan"]) == {"", "head"}
    assert cp["plan"][""]["tokens"]["split_dim"] == 1


def test_a_base_class_in_another_file_names_its_modules_as_that_file_imports_them(
    tmp_path: Path,
) -> None:
    """The base in `base.py`, the variant in `variant.py` (`from .base import BaseDiT, Block`):
    the base's constructors are resolved in the base's file."""
    source = VARIANT.read_text()
    cut = source.index("class WideBlock(Block):")
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "base.py").write_text(source[:cut])
    variant = source[cut : source.index("class DeltaBlock(Block):")]
    (tmp_path / "variant.py").write_text(
        "from __future__ import annotations\n\nfrom torch import nn\n\n"
        "from .base import BaseDiT, Block\n\n\n" + variant
    )
    _assert_drift_read(_cp(tmp_path / "variant.py", "WideVariantDiT"))
