"""One register-name rule for the suggestion and the check (`analysis.register_names`).

The suggestion never offers a name the check rejects; where no name can pass (a registered
adapter prefixes both classes), the suggestion is None with the reason, the plan builder refuses
the checkout target with it on the registerName field, and a hand-typed name is rejected with the
same messages whatever its length (`SanaVideoTransformer3DModel` included).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis.register_names import register_name_problems, suggest_register_name
from lsp_server.services import plan as planning

SANA_T, SANA_P = "SanaVideoTransformer3DModel", "SanaVideoPipeline"


def _build_plan(answers: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """The plan service's result as `cdit.lsp.buildPlan` answers it."""
    return planning.build_plan(answers, report).to_json()


@pytest.mark.parametrize(
    ("transformer", "pipeline", "registered"),
    [
        ("Krea2Transformer2DModel", "Krea2Pipeline", ["Flux", "Wan"]),
        ("AcmeVidTransformer3DModel", None, ["Acme2", "Flux"]),
        ("ZetaDiT2DModel", "ZetaDiTPAGPipeline", []),
        ("FluxNovaTransformer", "FluxNovaPipeline", ["FluxNovaX"]),  # only shorter names pass
        ("QuuxTransformer", "QuuxPipeline", ["Quuxy"]),
    ],
)
def test_every_suggestion_passes_the_check(
    transformer: str, pipeline: str | None, registered: list[str]
) -> None:
    suggestion = suggest_register_name(transformer, pipeline, registered)
    if suggestion.name is None:
        # then no prefix of both classes passes either: the reason is not a shortcut
        assert all(
            register_name_problems(transformer[:i], transformer, pipeline, registered)
            for i in range(1, len(transformer) + 1)
        ), suggestion.reason
    else:
        assert register_name_problems(suggestion.name, transformer, pipeline, registered) == []


def test_a_registered_prefix_of_both_classes_leaves_no_name_and_says_why() -> None:
    suggestion = suggest_register_name(SANA_T, SANA_P, ["Flux", "Sana"], "SanaVideo")
    assert suggestion.name is None
    assert "'Sana'" in suggestion.reason and "standalone target" in suggestion.reason
    # the check agrees for every length, the full transformer class name included
    for name in ("Sana", "SanaVideo", SANA_T):
        assert register_name_problems(name, SANA_T, SANA_P, ["Sana"]), name
    assert any("shadowed" in p for p in register_name_problems(SANA_T, SANA_T, None, ["Sana"]))
    # without the registry (standalone target) the same name is fine
    assert register_name_problems("SanaVideo", SANA_T, None, []) == []


def _sana_report() -> dict[str, Any]:
    from lsp_server.analysis.analyze import analyze_path

    report = analyze_path(
        "diffusers.models.transformers.transformer_sana_video",
        SANA_T,
        "diffusers.pipelines.sana_video.pipeline_sana_video",
    )
    return report.to_json()


def test_sana_video_on_installed_cache_dit(installed_checkout: Path) -> None:
    report = _sana_report()
    registry = report["transformers"][0]["registry"]
    if registry.get("existingAdapter") != "Sana":
        pytest.skip("this cache-dit does not register 'Sana'")
    assert registry["checkoutName"] is None
    assert "'Sana'" in registry["checkoutNameReason"]
    answers: dict[str, Any] = {
        "model": {"transformerClass": SANA_T, "pipelineClass": SANA_P},
        "target": {"kind": "cache-dit-checkout", "root": str(installed_checkout)},
        "example": {"name": "sana_video"},
    }
    # no name given: the builder refuses on the registerName field with the reason
    out = _build_plan(answers, report)
    assert [e["path"] for e in out["errors"]] == ["registerName"]
    assert "standalone target" in out["errors"][0]["message"]
    # names typed by hand: the same rule rejects each, the full class name included
    for name in ("SanaVideo", SANA_T):
        out = _build_plan({**answers, "registerName": name}, report)
        messages = [e["message"] for e in out["errors"] if e["path"] == "registerName"]
        assert any("shadowed by the registered 'Sana'" in m for m in messages), (name, out)
    # the standalone target takes the analysis' proposal as it is
    standalone = {**answers, "target": {"kind": "standalone", "path": "/tmp/sana_video_cdit.py"}}
    out = _build_plan(standalone, report)
    assert "errors" not in out and out["plan"]["registerName"] == "SanaVideo"


def test_the_suggestion_for_a_free_name_is_accepted_by_the_checkout(
    installed_checkout: Path,
) -> None:
    """Classes no registered adapter prefixes: the builder's own suggestion passes its check."""
    report = _sana_report()
    report["transformers"][0]["className"] = "ZorbVideoTransformer3DModel"
    answers = {
        "model": {
            "transformerClass": "ZorbVideoTransformer3DModel",
            "pipelineClass": "ZorbVideoPipeline",
        },
        "target": {"kind": "cache-dit-checkout", "root": str(installed_checkout)},
        "example": {"name": "zorb"},
    }
    out = _build_plan(answers, report)
    assert "errors" not in out, out.get("errors")
    assert out["plan"]["registerName"] == "ZorbVideo"
