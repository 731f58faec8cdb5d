"""`TensorParallelResult`: the `tensorParallel` part of the analyze JSON, and the diagnostics codes.

JSON keys (`to_json`):

* `attentionStrategy` - "mha" | "gqa_sharded" | "gqa_ffn_only" | "gqa_replicate" (the strategy for
  the smallest TP size considered); `strategyBySize` - {tp size: strategy}; `strategyReasons`.
* `layers` - {"<list>.*.<path>": "colwise" | "rowwise" | "colwise_replicate" |
  "rowwise_replicate_input"}: every layer that may exist, including conditional ones;
  `conditionalLayers` - {key: {"style", "condition", "defaultConfig"}} for layers created under a
  condition (`defaultConfig` false: only other config values create them); `layerReasons`.
* `shardDivAttrs` - ["<list>.*.<module path>.<attr>"] for `shard_div_attr`;
  `shardDivReasons` - {attr key: why it is divided, citing the processor code};
  `shardDivSkipped` - {attr key: why an attribute is left undivided: it is read in a per-head
  size such as `attn.inner_dim // attn.heads` (the head count absorbed by -1) that dividing it
  alone would change}.
* `warnings` - the diagnostics below (also appended to the transformer's diagnostics).
* `weightRearrangement` - [{"layer", "kind", "reason"}], kind fused_out_down | packed_gated |
  fused_qkv_mlp; a fused_out_down entry also has `producers`: the projections whose sharded
  outputs it joins (sorted); a fused_qkv_mlp entry also has `fallback` {"layers", "shardDivAttrs",
  "weightRearrangement"}: its list's whole plan without that rearrangement (the projection's
  output replicated); `distributedNorms` - [{"module", "projections"}] norms to replace;
  `dtensorUnsafe` - [{"name", "path", "line", "how", "message"}].
* `attention` - per attention module: query/key/value projections, head-count attributes and
  values, GQA evidence, whether it is sharded.
* `alternatives` - for GQA with non-divisible KV heads: {"gqa_ffn_only": {"removeLayers"},
  "gqa_replicate": {"layers", "shardDivAttrs"}}.
* `components` - TE-P / VAE-P support from model_index.json (`components.component_support`);
  `requiresModelMixin` - the transformer must subclass ModelMixin first.

Diagnostic codes (all emitted with the file and line of the evidence):

* CDIT301 (error; warning when the value comes from a default config) - a head count or another
  attribute divided by `shard_div_attr` is not divisible by a TP size (also a head count left
  undivided because `-1` absorbs it: each rank must still hold whole heads); lists the valid
  sizes.
* CDIT302 (warning) - GQA with a key/value head count not divisible by a TP size: attention is left
  unsharded (FFN-only TP) for long sequences, or Q replicated (`gqa_replicate`) for short ones;
  benchmark both.
* CDIT303 (warning) - fused QKV projection: sharded columns would split q/k/v at the wrong place;
  the plan replicates its output (safe) or the weight must be re-interleaved per head group. Also
  a projection split into groups ahead of its heads, and the projections of an attention holding
  a parameter per head: replicated.
* CDIT304 (info) - a weight needs rearranging before sharding (fused attention-out + MLP-down input,
  packed gate/up projection, fused QKV+MLP projection).
* CDIT305 (warning) - a normalization over the whole sharded width (QK-norm across heads):
  replace it with a distributed RMSNorm (all-reduce of the mean square over the TP group).
* CDIT306 (warning) - DTensor-unsafe fused kernel (flash_attn ops, triton, apex, liger, xformers
  ops, custom `torch.autograd.Function`): patch to PyTorch equivalents before parallelizing.
* CDIT307 (warning) - the transformer does not subclass diffusers `ModelMixin`; cache-dit's TP
  entry point asserts it.
* CDIT308 (info) - attention called with `enable_gqa=`: SDPA may pick a slow kernel; benchmark
  against repeating K/V heads (2.2x measured on one GQA model) or the cuDNN backend.
* CDIT309 (info) - no Linear pair to shard was found in a block list.
* CDIT310 (error; warning from a default config) - a sharded Linear's width is not divisible by a
  TP size.
* CDIT311 (info) - text encoder / VAE of `model_index.json` without a cache-dit planner.
* CDIT312 (warning) - the TP inference could not read part of the model (the plan may be partial).
* CDIT313 (warning) - a projection's output is reshaped or split to the full width read from an
  unsharded tensor's shape (`b, n, d = x.shape` ... `o.reshape(b, n, d)`): sharded, it would not
  fit; the plan replicates that projection pair (write `reshape(b, n, -1)` to shard it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model import Diagnostic


@dataclass
class TensorParallelResult:
    attention_strategy: str | None = None
    layers: dict[str, str] = field(default_factory=dict)
    shard_div_attrs: list[str] = field(default_factory=list)
    shard_div_reasons: dict[str, str] = field(default_factory=dict)
    shard_div_skipped: dict[str, str] = field(default_factory=dict)
    warnings: list[Diagnostic] = field(default_factory=list)
    conditional_layers: dict[str, dict[str, str]] = field(default_factory=dict)
    strategy_reasons: list[str] = field(default_factory=list)
    strategy_by_size: dict[int, str] = field(default_factory=dict)
    weight_rearrangement: list[dict[str, Any]] = field(default_factory=list)
    distributed_norms: list[dict[str, Any]] = field(default_factory=list)
    dtensor_unsafe: list[dict[str, Any]] = field(default_factory=list)
    attention: list[dict[str, Any]] = field(default_factory=list)
    alternatives: dict[str, dict[str, Any]] = field(default_factory=dict)
    layer_reasons: dict[str, str] = field(default_factory=dict)
    components: dict[str, Any] | None = None
    requires_model_mixin: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "attentionStrategy": self.attention_strategy,
            "layers": _sorted(self.layers),
            "shardDivAttrs": self.shard_div_attrs,
            "shardDivReasons": self.shard_div_reasons,
            "shardDivSkipped": self.shard_div_skipped,
            "warnings": [w.to_json() for w in self.warnings],
            "conditionalLayers": _sorted(self.conditional_layers),
            "strategyReasons": self.strategy_reasons,
            "strategyBySize": {str(k): v for k, v in self.strategy_by_size.items()},
            "weightRearrangement": self.weight_rearrangement,
            "distributedNorms": self.distributed_norms,
            "dtensorUnsafe": self.dtensor_unsafe,
            "attention": self.attention,
            "alternatives": self.alternatives,
            "layerReasons": _sorted(self.layer_reasons),
            "components": self.components,
            "requiresModelMixin": self.requires_model_mixin,
        }


def _sorted(value: Any) -> Any:
    """A dict by key (the passes fill some from sets: the JSON must not depend on hashing)."""
    return dict(sorted(value.items())) if isinstance(value, dict) else value
