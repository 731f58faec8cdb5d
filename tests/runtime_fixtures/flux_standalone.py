"""FIXTURE: a hand-written stand-in for the code generator's standalone module (Flux-like model).

Not generated: `lsp_server/codegen` is being written concurrently. This file has the interface the
generator emits, so the runtime and its tests can run against it meanwhile:

* ``TRANSFORMER_CLASS``: the transformer class the module integrates;
* ``block_adapter(pipe, **kwargs)``: the cache-dit ``BlockAdapter`` (block lists and
  ``ForwardPattern`` from the analysis: ``transformer_blocks`` and ``single_transformer_blocks``,
  both Pattern_1 in diffusers 0.42 where the single block takes and returns both streams);
* ``cp_plan(transformer)``: the analysis' context-parallel plan (``CP_PLAN_JSON``, the
  ``contextParallel.plan`` of ``analyze_path(<diffusers>/models/transformers/transformer_flux.py,
  "FluxTransformer2DModel").to_json()`` without its ``reason``/``line`` notes) converted with
  ``tests.cp_plan_json.to_cache_dit_plan``;
* ``enable(pipe, *, cache_config=None, parallelism_config=None, transformer=None)``: builds the
  adapter, fills ``parallelism_config.cp_plan`` for CP and calls ``cache_dit.enable_cache``.

TP, TE-P and VAE-P use the planners cache-dit registers for ``FluxTransformer…``, ``T5EncoderModel``
and ``AutoencoderKL`` (a generated module for an unregistered model would register its own).
"""

from __future__ import annotations

from typing import Any

TRANSFORMER_CLASS = "FluxTransformer2DModel"

CP_PLAN_JSON: dict[str, Any] = {
    "": {
        "hidden_states": {"split_dim": 1, "expected_dims": 3, "split_output": False},
        "encoder_hidden_states": {"split_dim": 1, "expected_dims": 3, "split_output": False},
        "img_ids": {"split_dim": 0, "expected_dims": 2, "split_output": False},
        "txt_ids": {"split_dim": 0, "expected_dims": 2, "split_output": False},
    },
    "proj_out": {"gather_dim": 1, "expected_dims": 3, "outputs": 1},
}


def block_adapter(pipe: Any, **kwargs: Any) -> Any:
    from cache_dit import BlockAdapter, ForwardPattern

    transformer = kwargs.pop("transformer", None) or pipe.transformer
    return BlockAdapter(
        pipe=pipe,
        transformer=transformer,
        blocks=[transformer.transformer_blocks, transformer.single_transformer_blocks],
        forward_pattern=[ForwardPattern.Pattern_1, ForwardPattern.Pattern_1],
        check_forward_pattern=True,
        has_separate_cfg=False,
        **kwargs,
    )


def cp_plan(transformer: Any) -> dict[str, Any]:
    from tests.cp_plan_json import to_cache_dit_plan

    return to_cache_dit_plan(CP_PLAN_JSON, transformer)


def enable(
    pipe: Any,
    *,
    cache_config: Any = None,
    parallelism_config: Any = None,
    transformer: Any = None,
) -> Any:
    import cache_dit

    transformer = transformer or pipe.transformer
    cp = parallelism_config is not None and parallelism_config.cp_enabled()
    if cp and parallelism_config.cp_plan is None:
        parallelism_config.cp_plan = cp_plan(transformer)
    if cache_config is None and parallelism_config is None:
        return pipe
    cache_dit.enable_cache(
        block_adapter(pipe, transformer=transformer),
        cache_config=cache_config,
        parallelism_config=parallelism_config,
    )
    return pipe
