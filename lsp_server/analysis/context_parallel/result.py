"""Context-parallel plan in cache-dit's hook vocabulary, and the result document."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model import Diagnostic, Evidence

# Symbolic block indices in module keys, resolved by code generation:
# `<list>.<last>` is the last block, `<list>.<each>` every block (one hook per block).
LAST = "<last>"
EACH = "<each>"

APPROACHES = (
    "root_split",
    "output_split",
    "single_point",
    "submodule_hooks",
    "hybrid",
    "none",
)


@dataclass(frozen=True)
class SplitInput:
    """`_ContextParallelInput(split_dim, expected_dims, split_output)` for one input or output."""

    split_dim: int
    expected_dims: int | None
    split_output: bool = False
    reason: str = ""
    line: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "split_dim": self.split_dim,
            "expected_dims": self.expected_dims,
            "split_output": self.split_output,
            "reason": self.reason,
            "line": self.line,
        }


@dataclass(frozen=True)
class GatherOutput:
    """`_ContextParallelOutput(gather_dim, expected_dims)`; `outputs` > 1 gathers a tuple return,
    but for the elements in `skip` (not token streams: a modulation handed back, an auxiliary
    value), which are left as they are (`None` in cache-dit's plan)."""

    gather_dim: int
    expected_dims: int | None
    outputs: int = 1
    reason: str = ""
    line: int = 0
    skip: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "gather_dim": self.gather_dim,
            "expected_dims": self.expected_dims,
            "outputs": self.outputs,
            "reason": self.reason,
            "line": self.line,
        }
        if self.skip:
            out["skip"] = list(self.skip)
        return out


@dataclass
class HookPlan:
    """Ordered module key -> inputs to split (by name, or output index) or an output to gather."""

    # A tuple of specs splits a tuple-valued input (`(cos, sin)`): one spec per element.
    splits: dict[str, dict[str, SplitInput | tuple[SplitInput, ...]]] = field(default_factory=dict)
    gathers: dict[str, GatherOutput] = field(default_factory=dict)

    def split(self, key: str, name: str, spec: SplitInput | tuple[SplitInput, ...]) -> None:
        self.splits.setdefault(key, {}).setdefault(name, spec)

    def gather(self, key: str, spec: GatherOutput) -> None:
        self.gathers.setdefault(key, spec)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            key: {
                name: [s.to_json() for s in spec] if isinstance(spec, tuple) else spec.to_json()
                for name, spec in inputs.items()
            }
            for key, inputs in self.splits.items()
        }
        for key, spec in self.gathers.items():
            out[key] = spec.to_json()
        return out


@dataclass
class AttentionMask:
    present: bool = False
    reorder_needed: bool = False
    sources: list[Evidence] = field(default_factory=list)
    params: list[str] = field(default_factory=list)  # forward's mask parameters the blocks get
    built_in_forward: bool = False  # forward builds a joint mask itself (no parameter to guard)
    # how the reorder is done, where it can be: at every block of `list`, the block's `mask`
    # argument is permuted into all-to-all order of `streams` (block parameters, in the order the
    # attention joins them); None when a reorder is needed and cannot be placed
    reorder_plan: dict[str, Any] | None = None
    # masks of a stream split at every block (`<list>.*`, the text for cross-attention keys),
    # split with that stream where each block receives it: {"list", "mask", "stream"} (block
    # parameters), with the evidence
    with_stream: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "present": self.present,
            "reorderNeeded": self.reorder_needed,
            "sources": [e.to_json() for e in self.sources],
            "params": list(self.params),
            "builtInForward": self.built_in_forward,
            "reorderPlan": self.reorder_plan,
            "withStream": list(self.with_stream),
        }


@dataclass(frozen=True)
class SdpaRoute:
    """A class whose method calls `scaled_dot_product_attention` itself: an attention processor
    (`owner="processor"`, its `__call__`) or a plain attention module (`owner="module"`, its
    `forward`). `names`: the bare names the call uses (`sdpa` after `from torch.nn.functional
    import scaled_dot_product_attention as sdpa`); empty when it goes through `F.`/`torch.`."""

    class_name: str
    owner: str
    names: tuple[str, ...]
    evidence: Evidence
    # the names among `names` bound to FlashAttention-2's `flash_attn_func` ((B, L, H, D) layout)
    flash_names: tuple[str, ...] = ()
    # attributes of the class pinned so its kernel branch runs (`fused_attn = True` for timm's
    # `if self.fused_attn: SDPA else: q @ k.T`, a flag set at run time)
    kernel_flags: tuple[tuple[str, bool], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "class": self.class_name,
            "owner": self.owner,
            "names": list(self.names),
            "flashNames": list(self.flash_names),
            **(
                {"kernelFlags": [[a, v] for a, v in self.kernel_flags]} if self.kernel_flags else {}
            ),
            **self.evidence.to_json(),
        }


@dataclass
class ContextParallelResult:
    approach: str
    plan: HookPlan
    evidence: list[Evidence] = field(default_factory=list)
    attention_mask: AttentionMask = field(default_factory=AttentionMask)
    uaa_recommended: bool = False
    patches: list[Evidence] = field(default_factory=list)  # method/processor patches needed
    # patches needed only when a mask is passed (the processor builds it from local lengths)
    mask_patches: list[Evidence] = field(default_factory=list)
    diffusers_plan: dict[str, Any] | None = None
    warnings: list[Diagnostic] = field(default_factory=list)
    # attention that calls SDPA itself: the generated module routes those calls through
    # cache-dit's context-parallel attention while these classes run
    sdpa_routes: list[SdpaRoute] = field(default_factory=list)
    # a split of an input axis some lists hold in the batch and others attend over
    factorised: Any = None  # factorised_split.FactorisedSplit

    def to_json(self) -> dict[str, Any]:
        factorised = {"factorised": self.factorised.to_json()} if self.factorised else {}
        return {
            "approach": self.approach,
            "plan": self.plan.to_json(),
            "evidence": [e.to_json() for e in self.evidence],
            "attentionMask": self.attention_mask.to_json(),
            "uaaRecommended": self.uaa_recommended,
            "patches": [e.to_json() for e in self.patches],
            "maskPatches": [e.to_json() for e in self.mask_patches],
            "sdpaRoutes": [r.to_json() for r in self.sdpa_routes],
            "diffusersPlan": self.diffusers_plan,
            "warnings": [w.to_json() for w in self.warnings],
            **factorised,
        }
