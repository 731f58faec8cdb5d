"""FIXTURE: a standalone cache-dit integration of `StableAudioDiTModel` (diffusers' StableAudio).

Started from ``cdit-integrate generate`` on diffusers' ``stable_audio_transformer`` module
(BlockAdapter: ``transformer_blocks``, Pattern_3, ``has_separate_cfg=False``; the CP plan's split
points) and finished by hand where the generated module left review notes or was wrong:

* ``rotary_embedding`` is a ``(cos, sin)`` tuple (``get_1d_rotary_pos_embed(use_real=True)``), so
  its plan entry is a pair of `_ContextParallelInput` (cache-dit checks the lengths match); the
  generated module had one, which fails with "object of type '_ContextParallelInput' has no len()".
* ``StableAudioAttnProcessor2_0`` calls ``F.scaled_dot_product_attention`` itself, which never
  runs the Ulysses all-to-all: `enable` gives the transformer's attention modules
  `DispatchStableAudioAttnProcessor`, the same math through cache-dit's ``_dispatch_attention_fn``
  (key/value heads repeated for GQA first, as the original does). The pipeline passes no attention
  masks, so the mask patch the generator asked for is not needed here.

Interface (as the generator emits it): ``TRANSFORMER_CLASS``, ``block_adapter``, ``cp_plan``,
``enable``. No TP planner: TP cannot run on CPU.
"""

from __future__ import annotations

from typing import Any

TRANSFORMER_CLASS = "StableAudioDiTModel"


def block_adapter(pipe: Any = None, **kwargs: Any) -> Any:
    from cache_dit import BlockAdapter, ForwardPattern

    transformer = kwargs.pop("transformer", None)
    if transformer is None:
        transformer = pipe.transformer
    return BlockAdapter(
        pipe=pipe,
        transformer=transformer,
        blocks=transformer.transformer_blocks,
        forward_pattern=ForwardPattern.Pattern_3,
        check_forward_pattern=True,
        check_num_outputs=True,
        has_separate_cfg=False,
        **kwargs,
    )


def cp_plan(transformer: Any) -> dict[str, Any]:
    from cache_dit.distributed.core import _ContextParallelInput, _ContextParallelOutput

    def rotary() -> Any:
        return _ContextParallelInput(split_dim=0, expected_dims=2)

    return {
        "transformer_blocks.0": {
            "hidden_states": _ContextParallelInput(split_dim=1, expected_dims=3),
        },
        "transformer_blocks.*": {
            "encoder_hidden_states": _ContextParallelInput(split_dim=1, expected_dims=3),
            "rotary_embedding": [rotary(), rotary()],
        },
        "proj_out": _ContextParallelOutput(gather_dim=1, expected_dims=3),
    }


class DispatchStableAudioAttnProcessor:
    """``StableAudioAttnProcessor2_0`` with attention through cache-dit's dispatcher."""

    _cp_config: Any = None
    _parallel_config: Any = None
    _attention_backend: Any = None

    def __call__(
        self,
        attn: Any,
        hidden_states: Any,
        encoder_hidden_states: Any = None,
        attention_mask: Any = None,
        rotary_emb: Any = None,
    ) -> Any:
        import torch
        from cache_dit.attention import _dispatch_attention_fn
        from diffusers.models.embeddings import apply_rotary_emb

        if attention_mask is not None:
            raise NotImplementedError("attention masks are not supported by this integration")
        batch_size = hidden_states.shape[0]
        query = attn.to_q(hidden_states)
        if encoder_hidden_states is None:
            encoder_hidden_states = hidden_states
        elif attn.norm_cross:
            encoder_hidden_states = attn.norm_encoder_hidden_states(encoder_hidden_states)
        key = attn.to_k(encoder_hidden_states)
        value = attn.to_v(encoder_hidden_states)
        head_dim = query.shape[-1] // attn.heads
        kv_heads = key.shape[-1] // head_dim
        query = query.view(batch_size, -1, attn.heads, head_dim).transpose(1, 2)
        key = key.view(batch_size, -1, kv_heads, head_dim).transpose(1, 2)
        value = value.view(batch_size, -1, kv_heads, head_dim).transpose(1, 2)
        if kv_heads != attn.heads:
            repeat = attn.heads // kv_heads
            key = torch.repeat_interleave(key, repeat, dim=1, output_size=key.shape[1] * repeat)
            value = torch.repeat_interleave(
                value, repeat, dim=1, output_size=value.shape[1] * repeat
            )
        if attn.norm_q is not None:
            query = attn.norm_q(query)
        if attn.norm_k is not None:
            key = attn.norm_k(key)
        if rotary_emb is not None:
            query_dtype, key_dtype = query.dtype, key.dtype
            query, key = query.to(torch.float32), key.to(torch.float32)
            rot = rotary_emb[0].shape[-1]
            rotated = apply_rotary_emb(
                query[..., :rot], rotary_emb, use_real=True, use_real_unbind_dim=-2
            )
            query = torch.cat((rotated, query[..., rot:]), dim=-1)
            if not attn.is_cross_attention:
                rotated = apply_rotary_emb(
                    key[..., :rot], rotary_emb, use_real=True, use_real_unbind_dim=-2
                )
                key = torch.cat((rotated, key[..., rot:]), dim=-1)
            query, key = query.to(query_dtype), key.to(key_dtype)
        # cache-dit's dispatcher takes (batch, sequence, heads, head_dim).
        out = _dispatch_attention_fn(
            query.transpose(1, 2),
            key.transpose(1, 2),
            value.transpose(1, 2),
            attn_mask=None,
            dropout_p=0.0,
            is_causal=False,
            backend=self._attention_backend,
            cp_config=self._cp_config,
        )
        out = out.reshape(batch_size, -1, attn.heads * head_dim).to(query.dtype)
        out = attn.to_out[1](attn.to_out[0](out))
        if attn.residual_connection:
            out = out + hidden_states
        return out / attn.rescale_output_factor


def _use_dispatch_processors(transformer: Any) -> None:
    from diffusers.models.attention_processor import StableAudioAttnProcessor2_0

    for module in transformer.modules():
        if isinstance(getattr(module, "processor", None), StableAudioAttnProcessor2_0):
            module.processor = DispatchStableAudioAttnProcessor()


def enable(
    pipe: Any,
    *,
    cache_config: Any = None,
    parallelism_config: Any = None,
    transformer: Any = None,
) -> Any:
    import cache_dit

    adapter = block_adapter(pipe, transformer=transformer)
    config = parallelism_config
    if config is not None and config.cp_enabled():
        _use_dispatch_processors(adapter.transformer)
        if config.cp_plan is None:
            config.cp_plan = cp_plan(adapter.transformer)
    if cache_config is None and config is None:
        return pipe
    return cache_dit.enable_cache(adapter, cache_config=cache_config, parallelism_config=config)
