"""The IntegrationPlan as a contract document (`cdit_runtime.contract.plan`): codegen's plans are
written through the contract codec, read back by it unchanged, and described by the schema
generated from the same dataclasses; plans and gate-check answers are told apart by
`document_kind`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdit_runtime.contract import PlanDocument, document_kind, from_json, plan_schema, to_json
from cdit_runtime.contract.schema_check import validate
from lsp_server.analysis import analyze_path
from lsp_server.codegen import IntegrationPlan, build_plan, parse_plan
from tests.conftest import FIXTURES, diffusers_file

REPO = Path(__file__).resolve().parents[1]
TOY = REPO / "tests" / "codegen_fixtures" / "toy" / "plan.json"
DEMO_ANSWERS = REPO / "examples" / "demo" / "flux_answers.json"
MODELS = FIXTURES / "models"
# (file, class): between them every optional section of the document is written: flash names,
# kernel flags, a mask reorder, stream masks and a mask guard, no CP plan, components, segments
ANALYZED = [
    (MODELS / "third_party" / "flash_dit.py", "FlashDiT"),
    (MODELS / "third_party" / "timm_flag_dit.py", "TimmFlagDiT"),
    (MODELS / "duet_mask_dit.py", "DuetMaskDiT"),
    (MODELS / "demo_mmdit.py", "DemoMMDiTTransformer2DModel"),
    (MODELS / "wan_lite_video.py", "WanLiteTransformer3DModel"),
    (diffusers_file("models/transformers/pixart_transformer_2d.py"), "PixArtTransformer2DModel"),
]


def _toy(kind: str) -> dict[str, Any]:
    text = TOY.read_text().replace("{TOY}", "/src/toy.py").replace("{TOY_VAE}", "/src/vae.py")
    data = json.loads(text.replace("{ROOT}", "/r"))
    if kind == "standalone":
        data["target"] = {"kind": "standalone", "path": "/p/cdit_toy.py"}
    return data


def _parsed(data: dict[str, Any]) -> IntegrationPlan:
    plan, errors = parse_plan(data)
    assert plan is not None, errors
    return plan


def _analyzed(path: Path, cls: str, target: dict[str, Any]) -> IntegrationPlan:
    report = analyze_path(path, cls, registry=False).to_json()
    answers = {
        "model": {"transformerClass": cls, "sources": {"transformer": str(path)}},
        "target": target,
        "contextParallel": {"enabled": True},
        "tensorParallel": {"enabled": True},
    }
    return _parsed(build_plan(report, answers))


def _plans() -> list[IntegrationPlan]:
    toy = [_parsed(_toy(kind)) for kind in ("standalone", "checkout")]
    refused = toy[0].with_refused({"cache": ("a reason",), "components[1]": ("b", "c")})
    standalone = {"kind": "standalone", "path": "/p/cdit_x.py"}
    checkout = {"kind": "cache-dit-checkout", "root": "/nonexistent"}
    analyzed = [_analyzed(path, cls, standalone) for path, cls in ANALYZED]
    return [*toy, refused, *analyzed, _analyzed(*ANALYZED[3], target=checkout)]


@pytest.fixture(scope="module")
def plans() -> list[IntegrationPlan]:
    return _plans()


def test_the_sections_under_test_are_written(plans: list[IntegrationPlan]) -> None:
    written = [p.to_json() for p in plans]
    cps = [w["contextParallel"] for w in written]
    assert any("flashNames" in cp for cp in cps) and any("kernelFlags" in cp for cp in cps)
    assert any(cp["maskReorder"] for cp in cps) and any(cp["streamMasks"] for cp in cps)
    assert any(cp["maskGuard"] for cp in cps) and any(cp["sdpaRoutes"] for cp in cps)
    assert any(w["refused"] for w in written) and any(w["components"] for w in written)
    rearranged = [r for w in written for r in w["tensorParallel"]["weightRearrangement"]]
    assert any("segments" in r for r in rearranged)
    assert {w["target"]["kind"] for w in written} == {"standalone", "cache-dit-checkout"}


def test_a_written_plan_reads_back_through_the_codec_unchanged(
    plans: list[IntegrationPlan],
) -> None:
    for plan in plans:
        written = plan.to_json()
        document = from_json(PlanDocument, json.loads(json.dumps(written)))
        assert json.dumps(to_json(document), indent=1) == json.dumps(written, indent=1)
        again = _parsed(written).to_json()  # codegen reads the same plan (`refused` is not read)
        assert {**again, "refused": []} == {**written, "refused": []}


def test_empty_optional_keys_are_left_out(plans: list[IntegrationPlan]) -> None:
    """`omit_empty` keeps the document's shape: a target names only its own field, and flash
    names, kernel flags and weight segments appear only when there are some."""
    standalone = plans[0].to_json()
    assert standalone["target"] == {"kind": "standalone", "path": "/p/cdit_toy.py"}
    assert plans[1].to_json()["target"] == {"kind": "cache-dit-checkout", "root": "/r"}
    assert "flashNames" not in standalone["contextParallel"]
    assert "kernelFlags" not in standalone["contextParallel"]
    rearranged = standalone["tensorParallel"]["weightRearrangement"]
    assert [sorted(r) for r in rearranged] == [
        ["kind", "layer", "reason", "segments"],
        ["kind", "layer", "reason"],
    ]


def test_the_generated_schema_accepts_every_plan_written(plans: list[IntegrationPlan]) -> None:
    schema = plan_schema()
    assert schema["$id"].endswith("integration-plan.json") and schema["schemaVersion"] == 1
    for plan in plans:
        assert validate(plan.to_json(), schema, "PlanDocument") == []
    document = schema["$defs"]["PlanDocument"]
    assert document["required"] == ["model", "registerName", "modelSlug", "target", "cache"]
    assert list(document["properties"]) == list(plans[0].to_json())


def test_plans_and_answers_are_told_apart() -> None:
    answers = json.loads(DEMO_ANSWERS.read_text())
    assert document_kind(answers) == "answers"
    assert document_kind(_toy("standalone")) == "plan"
    assert document_kind(_parsed(_toy("checkout")).to_json()) == "plan"


def test_the_checked_in_plan_reads_and_round_trips() -> None:
    """The toy fixture (written by hand, some keys left to their defaults) reads as a plan
    whose document then reads back unchanged."""
    for kind in ("standalone", "checkout"):
        plan = _parsed(_toy(kind))
        written = plan.to_json()
        assert _parsed(written) == plan
        assert to_json(from_json(PlanDocument, written)) == written


def test_the_answers_fields_are_the_contracts() -> None:
    """codegen checks answers against the contract's `AnswersDocument`: every field, its JSON
    types, parents before their fields."""
    from cdit_runtime.contract.answers import AnswersDocument
    from lsp_server.codegen import answer_errors
    from lsp_server.codegen.plan_answers import answer_fields

    text, obj, flag, none = (str, type(None)), (dict, type(None)), (bool, type(None)), type(None)
    fields = answer_fields()
    assert list(fields)[:8] == [
        "model",
        "model.transformerClass",
        "model.pipelineClass",
        "model.transformerModule",
        "model.localPath",
        "model.defaultModelId",
        "model.sources",
        "model.sources.transformer",
    ]
    assert (fields["model"], fields["target"], fields["example"]) == (obj, obj, obj)
    assert fields["contextParallel.ulyssesAnything"] == flag
    assert fields["tensorParallel.strategy"] == text
    assert (fields["run"], fields["run.callArgs"], fields["run.inputs"]) == (obj, obj, obj)
    assert len(fields) == 24 and all(t[-1] is none for t in fields.values())
    answers = json.loads(DEMO_ANSWERS.read_text())
    assert answer_errors(answers) == []
    read = from_json(AnswersDocument, answers)  # the bundled demo's answers, as the contract
    assert read.model is not None and read.model.sources is not None
    assert read.model.sources.transformer == answers["model"]["sources"]["transformer"]
    assert read.target == answers["target"]


def test_plan_schema_file_is_generated_from_the_dataclasses() -> None:
    """The checked-in schema (from which the extension's `plan.ts` is generated) is the one the
    dataclasses give."""
    from cdit_runtime.contract.plan import plan_schema_text

    path = REPO / "cdit_runtime" / "contract" / "plan.schema.json"
    assert path.read_text() == plan_schema_text(), (
        "regenerate: python -m cdit_runtime schema --document plan --write "
        "cdit_runtime/contract/plan.schema.json"
    )
