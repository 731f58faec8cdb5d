# Synthetic fixture for cdit-integrator (not a real model). Licensed Apache-2.0 like the project.
"""DemoMMDiT: a small, readable MMDiT-style diffusion transformer.

This file is the project's demo input for ``cdit-integrate analyze``. It is deliberately clean:

* ``transformer_blocks`` -- double-stream blocks. Text and image tokens keep separate weights but attend
  jointly. ``DemoMMDiTDoubleBlock.forward(hidden_states, encoder_hidden_states, temb)`` returns
  ``(encoder_hidden_states, hidden_states)`` (text first, like Flux/SD3).
* ``single_transformer_blocks`` -- single-stream blocks over the concatenated ``[text, image]`` sequence.
  ``DemoMMDiTSingleBlock.forward(hidden_states, temb)`` returns ``hidden_states`` only.

The loops contain nothing but the block call (plus the usual gradient-checkpointing branch), and nothing
outside the loops indexes the block lists.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.attention import FeedForward
from diffusers.models.attention_processor import Attention, AttnProcessor2_0, JointAttnProcessor2_0
from diffusers.models.embeddings import TimestepEmbedding, Timesteps
from diffusers.models.modeling_outputs import Transformer2DModelOutput
from diffusers.models.modeling_utils import ModelMixin
from diffusers.models.normalization import (
    AdaLayerNormContinuous,
    AdaLayerNormZero,
    AdaLayerNormZeroSingle,
)


class DemoMMDiTDoubleBlock(nn.Module):
    """Joint-attention block with one set of weights per stream."""

    def __init__(self, dim: int, num_attention_heads: int, attention_head_dim: int):
        super().__init__()
        self.norm1 = AdaLayerNormZero(dim)
        self.norm1_context = AdaLayerNormZero(dim)
        self.attn = Attention(
            query_dim=dim,
            added_kv_proj_dim=dim,
            dim_head=attention_head_dim,
            heads=num_attention_heads,
            out_dim=dim,
            context_pre_only=False,
            bias=True,
            qk_norm="rms_norm",
            eps=1e-6,
            processor=JointAttnProcessor2_0(),
        )
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.ff = FeedForward(dim=dim, dim_out=dim, activation_fn="gelu-approximate")
        self.norm2_context = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.ff_context = FeedForward(dim=dim, dim_out=dim, activation_fn="gelu-approximate")

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        temb: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        norm_hidden_states, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.norm1(hidden_states, emb=temb)
        norm_encoder_hidden_states, c_gate_msa, c_shift_mlp, c_scale_mlp, c_gate_mlp = self.norm1_context(
            encoder_hidden_states, emb=temb
        )

        # Joint attention over [image, text] with per-stream projections.
        attn_output, context_attn_output = self.attn(
            hidden_states=norm_hidden_states,
            encoder_hidden_states=norm_encoder_hidden_states,
        )

        # Image stream.
        hidden_states = hidden_states + gate_msa.unsqueeze(1) * attn_output
        norm_hidden_states = self.norm2(hidden_states)
        norm_hidden_states = norm_hidden_states * (1 + scale_mlp[:, None]) + shift_mlp[:, None]
        hidden_states = hidden_states + gate_mlp.unsqueeze(1) * self.ff(norm_hidden_states)

        # Text stream.
        encoder_hidden_states = encoder_hidden_states + c_gate_msa.unsqueeze(1) * context_attn_output
        norm_encoder_hidden_states = self.norm2_context(encoder_hidden_states)
        norm_encoder_hidden_states = norm_encoder_hidden_states * (1 + c_scale_mlp[:, None]) + c_shift_mlp[:, None]
        encoder_hidden_states = encoder_hidden_states + c_gate_mlp.unsqueeze(1) * self.ff_context(
            norm_encoder_hidden_states
        )

        return encoder_hidden_states, hidden_states


class DemoMMDiTSingleBlock(nn.Module):
    """Parallel attention + MLP block on one (already concatenated) token sequence."""

    def __init__(self, dim: int, num_attention_heads: int, attention_head_dim: int, mlp_ratio: float = 4.0):
        super().__init__()
        self.mlp_hidden_dim = int(dim * mlp_ratio)
        self.norm = AdaLayerNormZeroSingle(dim)
        self.proj_mlp = nn.Linear(dim, self.mlp_hidden_dim)
        self.act_mlp = nn.GELU(approximate="tanh")
        self.attn = Attention(
            query_dim=dim,
            dim_head=attention_head_dim,
            heads=num_attention_heads,
            out_dim=dim,
            bias=True,
            qk_norm="rms_norm",
            eps=1e-6,
            processor=AttnProcessor2_0(),
        )
        self.proj_out = nn.Linear(dim + self.mlp_hidden_dim, dim)

    def forward(self, hidden_states: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        residual = hidden_states
        norm_hidden_states, gate = self.norm(hidden_states, emb=temb)
        mlp_hidden_states = self.act_mlp(self.proj_mlp(norm_hidden_states))
        attn_output = self.attn(hidden_states=norm_hidden_states)
        hidden_states = torch.cat([attn_output, mlp_hidden_states], dim=2)
        hidden_states = gate.unsqueeze(1) * self.proj_out(hidden_states)
        return residual + hidden_states


class DemoMMDiTTransformer2DModel(ModelMixin, ConfigMixin):
    """A tiny MMDiT: patchify -> N double-stream blocks -> M single-stream blocks -> unpatchify.

    Args:
        patch_size: side of the square latent patches.
        in_channels: latent channels.
        num_layers: number of double-stream blocks.
        num_single_layers: number of single-stream blocks.
        attention_head_dim / num_attention_heads: attention geometry (inner dim = product).
        joint_attention_dim: width of the text encoder features.
        max_image_tokens: size of the learned positional table.
    """

    _supports_gradient_checkpointing = True
    _no_split_modules = ["DemoMMDiTDoubleBlock", "DemoMMDiTSingleBlock"]

    @register_to_config
    def __init__(
        self,
        patch_size: int = 2,
        in_channels: int = 16,
        out_channels: int | None = None,
        num_layers: int = 12,
        num_single_layers: int = 24,
        attention_head_dim: int = 64,
        num_attention_heads: int = 16,
        joint_attention_dim: int = 2048,
        max_image_tokens: int = 4096,
    ):
        super().__init__()
        self.out_channels = out_channels or in_channels
        self.inner_dim = num_attention_heads * attention_head_dim

        self.x_embedder = nn.Linear(in_channels * patch_size * patch_size, self.inner_dim)
        self.pos_embed = nn.Parameter(torch.zeros(1, max_image_tokens, self.inner_dim))
        self.context_embedder = nn.Linear(joint_attention_dim, self.inner_dim)
        self.time_proj = Timesteps(num_channels=256, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.time_embedding = TimestepEmbedding(in_channels=256, time_embed_dim=self.inner_dim)

        self.transformer_blocks = nn.ModuleList(
            [
                DemoMMDiTDoubleBlock(self.inner_dim, num_attention_heads, attention_head_dim)
                for _ in range(num_layers)
            ]
        )
        self.single_transformer_blocks = nn.ModuleList(
            [
                DemoMMDiTSingleBlock(self.inner_dim, num_attention_heads, attention_head_dim)
                for _ in range(num_single_layers)
            ]
        )

        self.norm_out = AdaLayerNormContinuous(self.inner_dim, self.inner_dim, elementwise_affine=False, eps=1e-6)
        self.proj_out = nn.Linear(self.inner_dim, patch_size * patch_size * self.out_channels)
        self.gradient_checkpointing = False

    def _patchify(self, latents: torch.Tensor) -> torch.Tensor:
        p = self.config.patch_size
        b, c, h, w = latents.shape
        latents = latents.reshape(b, c, h // p, p, w // p, p)
        return latents.permute(0, 2, 4, 1, 3, 5).reshape(b, (h // p) * (w // p), c * p * p)

    def _unpatchify(self, tokens: torch.Tensor, height: int, width: int) -> torch.Tensor:
        p = self.config.patch_size
        b = tokens.shape[0]
        tokens = tokens.reshape(b, height // p, width // p, self.out_channels, p, p)
        return tokens.permute(0, 3, 1, 4, 2, 5).reshape(b, self.out_channels, height, width)

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        timestep: torch.Tensor,
        return_dict: bool = True,
    ) -> Transformer2DModelOutput | tuple[torch.Tensor]:
        """
        Args:
            hidden_states: latents `(batch, in_channels, height, width)`.
            encoder_hidden_states: text features `(batch, text_len, joint_attention_dim)`.
            timestep: `(batch,)` diffusion timesteps.
        """
        height, width = hidden_states.shape[-2:]

        # 1. Embed image patches, text tokens and the timestep.
        hidden_states = self.x_embedder(self._patchify(hidden_states))
        hidden_states = hidden_states + self.pos_embed[:, : hidden_states.shape[1]]
        encoder_hidden_states = self.context_embedder(encoder_hidden_states)
        temb = self.time_embedding(self.time_proj(timestep).to(hidden_states.dtype))

        # 2. Double-stream blocks: each returns (encoder_hidden_states, hidden_states).
        for block in self.transformer_blocks:
            if torch.is_grad_enabled() and self.gradient_checkpointing:
                encoder_hidden_states, hidden_states = self._gradient_checkpointing_func(
                    block, hidden_states, encoder_hidden_states, temb
                )
            else:
                encoder_hidden_states, hidden_states = block(
                    hidden_states=hidden_states,
                    encoder_hidden_states=encoder_hidden_states,
                    temb=temb,
                )

        # 3. Single-stream blocks over the concatenated [text, image] sequence.
        text_seq_len = encoder_hidden_states.shape[1]
        hidden_states = torch.cat([encoder_hidden_states, hidden_states], dim=1)
        for block in self.single_transformer_blocks:
            if torch.is_grad_enabled() and self.gradient_checkpointing:
                hidden_states = self._gradient_checkpointing_func(block, hidden_states, temb)
            else:
                hidden_states = block(hidden_states=hidden_states, temb=temb)
        hidden_states = hidden_states[:, text_seq_len:]

        # 4. Output head.
        hidden_states = self.norm_out(hidden_states, temb)
        hidden_states = self.proj_out(hidden_states)
        output = self._unpatchify(hidden_states, height, width)

        if not return_dict:
            return (output,)
        return Transformer2DModelOutput(sample=output)
