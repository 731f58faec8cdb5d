"""The gate-check answers: what the user tells about the model, from which a plan is built.

An answers document is a `plan.PlanDocument` without ``cache`` (`plan.document_kind`): the
analysis of the transformer it names fills in the parts. `AnswersDocument` names the fields the
plan builder reads and the JSON types it accepts (each may be absent or null); codegen checks an
answers document against it field by field (`lsp_server.codegen.answer_errors`) before anything is
analyzed. Other keys are plan sections given ahead, checked when the plan is.

Standard library only (see `contract`).
"""

# `doc_field(...)` returns `dataclasses.field(...)`; ruff cannot see that through the helper.
# ruff: noqa: RUF009
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .common import doc_field


@dataclass(frozen=True, kw_only=True)
class AnswerSources:
    """Source files: file paths or dotted module names."""

    transformer: str | None = doc_field("the transformer's source (needed)", default=None)
    pipeline: str | None = doc_field("the pipeline's source", default=None)
    config: str | None = doc_field("the model's config.json", default=None)
    model_index: str | None = doc_field("the pipeline's model_index.json", default=None)


@dataclass(frozen=True, kw_only=True)
class AnswerModel:
    """The model."""

    transformer_class: str | None = doc_field("the transformer class", default=None)
    pipeline_class: str | None = doc_field("the pipeline class", default=None)
    transformer_module: str | None = doc_field("the module it is imported from", default=None)
    local_path: str | None = doc_field("local model directory", default=None)
    default_model_id: str | None = doc_field("hub id the CLI example defaults to", default=None)
    sources: AnswerSources | None = doc_field("the source files", default=None)


@dataclass(frozen=True, kw_only=True)
class AnswerContextParallel:
    """Context parallelism wanted, and how."""

    enabled: bool | None = doc_field("generate it", default=None)
    ulysses_anything: bool | None = doc_field("use Ulysses Anything Attention", default=None)


@dataclass(frozen=True, kw_only=True)
class AnswerTensorParallel:
    """Tensor parallelism wanted, and how."""

    enabled: bool | None = doc_field("generate it", default=None)
    strategy: str | None = doc_field("the attention strategy", default=None)


@dataclass(frozen=True, kw_only=True)
class AnswerRun:
    """How the verification runs call the pipeline (the gate check's "Pipeline call arguments";
    `extraCallKwargs` and `inputs` of the request). The plan's `has_separate_cfg` is decided
    for this call: a second, unconditional call may run only with some arguments."""

    call_args: dict[str, Any] | None = doc_field("name -> JSON value", default=None)
    inputs: dict[str, str] | None = doc_field("name -> file the input is loaded from", default=None)


@dataclass(frozen=True, kw_only=True)
class AnswersDocument:
    """The gate-check answers a plan is built from (the fields the plan builder reads)."""

    model: AnswerModel | None = doc_field("the model", default=None)
    register_name: str | None = doc_field("cache-dit's registration name", default=None)
    model_slug: str | None = doc_field("name of the generated files", default=None)
    target: dict[str, Any] | None = doc_field("where the code goes (a plan target)", default=None)
    context_parallel: AnswerContextParallel | None = doc_field("CP", default=None)
    tensor_parallel: AnswerTensorParallel | None = doc_field("TP", default=None)
    example: dict[str, Any] | None = doc_field("the CLI example (a plan example)", default=None)
    run: AnswerRun | None = doc_field("how the pipeline is called", default=None)
