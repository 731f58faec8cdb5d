"""Attention kernels nothing routes through cache-dit's context-parallel attention refuse CP
before anything runs: xformers' `memory_efficient_attention`, SageAttention, PyTorch's
FlexAttention (also bound under another name or compiled under a longer one). FlexAttention was
planned before: on 2 gloo ranks the module ran and was wrong (Ulysses and Ring 3.5e3 off at a
9.3e3 scale: each rank attended over its own tokens). SDPA through a bare name is routed (the
control)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES

_IMPORT = "from torch.nn.functional import scaled_dot_product_attention as sdpa\n"
_CALL = "        out = sdpa(q, k, v)\n"


@pytest.mark.parametrize(
    ("imports", "call", "named"),
    [
        (
            "from torch.nn.attention.flex_attention import flex_attention\n",
            "        out = flex_attention(q, k, v)\n",
            "`flex_attention`",
        ),
        (
            "from torch.nn.attention.flex_attention import flex_attention as fa\n",
            "        out = fa(q, k, v)\n",
            "`fa`",
        ),
        (
            "from torch.nn.attention.flex_attention import flex_attention\n"
            "flex_attention_compiled = torch.compile(flex_attention)\n",
            "        out = flex_attention_compiled(q, k, v)\n",
            "`flex_attention_compiled`",
        ),
        (
            "import xformers.ops as xops\n",
            "        out = xops.memory_efficient_attention(q, k, v)\n",
            "`memory_efficient_attention`",
        ),
        ("from sageattention import sageattn\n", "        out = sageattn(q, k, v)\n", "`sageattn`"),
        ("", _CALL, None),  # the control: SDPA, routed
    ],
)
def test_unrouted_attention_kernels_refuse_cp(
    tmp_path: Path, imports: str, call: str, named: str | None
) -> None:
    text = (FIXTURES / "models" / "plain_sdpa_dit.py").read_text()
    assert _IMPORT in text and _CALL in text
    path = tmp_path / "kernel_dit.py"
    path.write_text(text.replace(_IMPORT, _IMPORT + imports).replace(_CALL, call))
    (t,) = analyze_path(path, "PlainSdpaDiT", registry=False).to_json()["transformers"]
    cp = t["contextParallel"]
    if named is None:
        assert cp["approach"] != "none"
        return
    assert cp["approach"] == "none"
    assert any(f"SelfAttention calls {named} directly" in w["message"] for w in cp["warnings"])
