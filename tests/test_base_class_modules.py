"""Modules a model variant inherits from its base class's `__init__` (`super().__init__(...)`,
then only its blocks rebuilt): the context-parallel reading of forward knows them as modules.

`third_party/variant_dit.py`: `WideVariantDiT`'s rotary module counts positions from the tokens
it is handed, built by the base's `__init__`: the root split is blocked (position drift) and the
stream is split at the first block, the rotary outputs split in place (before: a root split,
every rank counting from 0). `ResidualVariantDiT` adds each block's update to the stream: the
caller's tables, read by their use through the base block's `super().forward`, block the root
split and are split where the blocks receive them, the gather on the base's `head` (before: no
module after the loop was known, CP refused). Both plans run on 2 gloo ranks
(tests/test_cp_plans_gloo.py: `variant_wide`, `variant_residual`; controls: the old root split,
0.038 off, and the caller's tables left whole, which stops)."""

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


def test_a_residual_loop_gathers_at_the_base_head_and_caller_tables_split_at_the_blocks() -> None:
    """`ResidualVariantDiT`: the caller's `(cos, sin)` are read as position tables where the
    base block's attention (reached through `super().forward`) multiplies the queries by them:
    they block the root split and are split where the blocks receive them (a root split of the
    tokens alone left them whole beside each rank's tokens); the gather is on the base's head."""
    cp = _cp(VARIANT, "ResidualVariantDiT")
    assert cp["approach"] == "single_point"
    assert set(cp["plan"]) == {"blocks.0", "blocks.*", "head"}
    assert {k: v["split_dim"] for k, v in cp["plan"]["blocks.*"].items()} == {"cos": 0, "sin": 0}
    assert any("position table the caller passes" in e["message"] for e in cp["evidence"])


def test_the_sdpa_of_a_block_subclass_built_by_its_base_init_is_routed() -> None:
    """`WideBlock(Block)` only changes an argument of `super().__init__`: its `mixer` (an
    SDPA-calling module) is built by the base's `__init__`, and must be routed through the CP
    attention (unrouted, every rank attended over its own tokens: 0.17 off on 2 gloo ranks)."""
    cp = _cp(VARIANT, "WideVariantDiT")
    assert [(r["class"], r["owner"]) for r in cp["sdpaRoutes"]] == [("Mixer", "module")]


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


def test_blocks_declared_by_a_base_in_another_file_are_read_there(tmp_path: Path) -> None:
    """A variant that adds a module and keeps the base's blocks (`self.blocks` declared in
    `base.py`, whose `Block` the variant's file does not import): the block class is resolved in
    the base's file, so its signature is read and the stream is split where it enters
    `blocks.0` (before: the block was unknown and the plan split only the rotary outputs)."""
    source = VARIANT.read_text()
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "base.py").write_text(source[: source.index("class WideBlock(Block):")])
    (tmp_path / "variant.py").write_text(
        "from torch import nn\n\nfrom .base import BaseDiT\n\n\n"
        "class GainDiT(BaseDiT):\n"
        "    def __init__(self, channels=4, dim=32, heads=2, depth=2):\n"
        "        super().__init__(channels, dim, heads, depth)\n"
        "        self.gain = nn.Linear(dim, dim)\n\n"
        "    def forward(self, tokens, timestep):\n"
        "        h = self.embed(tokens)\n"
        "        c = self.time(timestep.float().reshape(-1, 1))\n"
        "        cos, sin = self.rope(h)\n"
        "        for blk in self.blocks:\n"
        "            h = blk(h, c, cos, sin)\n"
        "        return self.head(self.gain(h))\n"
    )
    cp = _cp(tmp_path / "variant.py", "GainDiT")
    assert cp["approach"] == "single_point"
    assert cp["plan"]["blocks.0"]["x"]["split_dim"] == 1


def test_blocks_whose_source_is_not_found_refuse_cp(tmp_path: Path) -> None:
    """Blocks of a class whose source is not found (a vendor package not installed): their
    parameters are unknown, so nothing can be split where the stream enters them; CP is refused
    with that reason (before: a plan splitting only the rotary outputs, which cannot run)."""
    source = VARIANT.read_text()
    source = source.replace(
        "from torch.nn import functional as F\n",
        "from torch.nn import functional as F\nfrom vendor_blocks import FancyBlock\n",
    ).replace(
        "self.blocks = nn.ModuleList([WideBlock(dim, heads) for _ in range(depth)])",
        "self.blocks = nn.ModuleList([FancyBlock(dim, heads) for _ in range(depth)])",
    )
    path = tmp_path / "vendor_variant_dit.py"
    path.write_text(source)
    cp = _cp(path, "WideVariantDiT")
    assert cp["approach"] == "none" and cp["plan"] == {}
    assert any(
        "parameters of `FancyBlock.forward` are not read" in w["message"] for w in cp["warnings"]
    )
