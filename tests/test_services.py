"""The use cases the CLI and the server share (`lsp_server.services`): typed values in and out,
every failure one `ProblemError` carrying a `Problem`, and the wire form unchanged (the
analysis' own error JSON, `cdit.lsp.buildPlan`'s `{plan, errors}`)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdit_runtime.contract import Problem, ProblemError
from lsp_server.analysis import AnalysisError, AnalysisResult, analyze_path
from lsp_server.services import generate as generating
from lsp_server.services import plan as planning
from lsp_server.services.analyze import AnalyzeRequest, analyze_source, input_problem
from lsp_server.services.codegen_module import UNAVAILABLE
from lsp_server.services.generate import generate_files
from lsp_server.services.problems import CONFLICT, FIELD, from_analysis_error
from lsp_server.services.verify import check_request, missing_runtime
from tests.conftest import FIXTURES

DEMO = FIXTURES / "models" / "demo_mmdit.py"
DEMO_CLASS = "DemoMMDiTTransformer2DModel"


def _refusal(request: AnalyzeRequest) -> ProblemError:
    with pytest.raises(ProblemError) as caught:
        analyze_source(request)
    return caught.value


def test_analyze_returns_the_analysis() -> None:
    result = analyze_source(AnalyzeRequest(DEMO, registry=False))
    assert isinstance(result, AnalysisResult)
    assert [t["className"] for t in result.to_json()["transformers"]] == [DEMO_CLASS]


@pytest.mark.parametrize(
    "source",
    ["class A(:\n    pass\n", "def f():\n    return 1\n"],
    ids=["syntax error", "no transformer"],
)
def test_an_analysis_error_keeps_its_code_place_and_wire_form(tmp_path: Path, source: str) -> None:
    file = tmp_path / "m.py"
    file.write_text(source, encoding="utf-8")
    with pytest.raises(AnalysisError) as direct:
        analyze_path(file, registry=False)
    refused = _refusal(AnalyzeRequest(file, registry=False))
    assert refused.problem == from_analysis_error(direct.value)
    assert refused.problem.located() == direct.value.message
    assert refused.error_json() == direct.value.to_json()


def test_a_syntax_error_is_located_by_fields(tmp_path: Path) -> None:
    file = tmp_path / "m.py"
    file.write_text("x = 1\nclass A(:\n    pass\n", encoding="utf-8")
    problem = _refusal(AnalyzeRequest(file)).problem
    assert (problem.code, problem.line) == ("syntax-error", 2)
    assert problem.path.endswith("m.py") and str(problem.line) not in problem.message


def test_inputs_are_checked_before_the_analysis(tmp_path: Path) -> None:
    big = input_problem(AnalyzeRequest(DEMO, tp_sizes=(2, 70000)))
    assert big == Problem("bad-input", "--tp-size 70000: too large (at most 65536)")
    folder = input_problem(AnalyzeRequest(DEMO, config=str(tmp_path)))
    assert folder is not None and folder.code == "bad-input" and "--config" in folder.message
    if hasattr(os, "mkfifo"):  # a FIFO's read would block: refused without opening it
        fifo = tmp_path / "config.json"
        os.mkfifo(fifo)
        assert _refusal(AnalyzeRequest(DEMO, config=str(fifo))).problem.code == "bad-input"
    # a missing config is the analysis' own error, with its code
    missing = _refusal(AnalyzeRequest(DEMO, config=str(tmp_path / "nope.json")))
    assert missing.problem.code != "bad-input"


def test_a_name_the_file_system_refuses_is_unreadable(tmp_path: Path) -> None:
    refused = _refusal(AnalyzeRequest(tmp_path / ("x" * 300 + ".py")))
    assert refused.problem.code == "unreadable"
    assert refused.problem.message.endswith(" characters): file name too long")


def test_the_cli_prints_the_services_problem(tmp_path: Path) -> None:
    file = tmp_path / "m.py"
    file.write_text("class A(:\n    pass\n", encoding="utf-8")
    problem = _refusal(AnalyzeRequest(file)).problem
    done = subprocess.run(
        [sys.executable, "-m", "lsp_server.cli", "analyze", str(file)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == f"cdit-integrate: error: {' '.join(problem.located().split())}\n"


def _answers(target: Path) -> dict:
    return {
        "model": {"transformerClass": DEMO_CLASS, "sources": {"transformer": str(DEMO)}},
        "target": {"kind": "standalone", "path": str(target)},
    }


def test_plan_from_answers_and_its_problems(tmp_path: Path) -> None:
    report = analyze_source(AnalyzeRequest(DEMO, registry=False)).to_json()
    planned = planning.build_plan(_answers(tmp_path / "demo_cdit.py"), report)
    assert planned.plan is not None and "cache" in planned.plan
    assert planned.problems == () and planned.to_json() == {"plan": planned.plan}

    wrong = planning.build_plan({"model": {"transformerClass": 3}, "target": []}, report)
    assert wrong.plan is None
    assert {p.path for p in wrong.problems} == {"model.transformerClass", "target"}
    assert all(set(e) == {"path", "message"} for e in wrong.to_json()["errors"])
    assert "plan" not in wrong.to_json()

    failed = planning.analysis_failed(Problem("syntax-error", "bad", path="/m.py", line=2))
    assert failed.to_json() == {
        "errors": [{"path": "model.sources.transformer", "message": "/m.py:2: bad"}]
    }


def test_generate_files_then_nothing_to_change(tmp_path: Path) -> None:
    report = analyze_source(AnalyzeRequest(DEMO, registry=False)).to_json()
    target = tmp_path / "demo_cdit.py"
    plan = planning.build_plan(_answers(target), report).plan
    assert plan is not None
    generated = generate_files(plan, ["all"], tmp_path, (tmp_path,))
    paths = {Path(c.path) for c in generated.changes}
    assert paths == {target, tmp_path / ".cdit" / "generated.json"}
    assert all(c.old is None for c in generated.changes)
    for change in generated.changes:  # what the editor would apply
        Path(change.path).parent.mkdir(parents=True, exist_ok=True)
        Path(change.path).write_text(change.new, encoding="utf-8")
    assert generate_files(plan, ["all"], tmp_path, (tmp_path,)).changes == []


def test_generate_refuses_with_one_joined_problem(tmp_path: Path) -> None:
    report = analyze_source(AnalyzeRequest(DEMO, registry=False)).to_json()
    plan = planning.build_plan(_answers(tmp_path / "demo_cdit.py"), report).plan
    assert plan is not None
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(ProblemError) as outside:
        generate_files(plan, ["all"], tmp_path, (elsewhere,), outside_hint="move it")
    assert outside.value.problem.code == "generation-failed"
    assert outside.value.parts and outside.value.parts[0].path
    assert outside.value.problem.hint == "nothing was changed"

    deep: dict = {}
    for _ in range(200):
        deep = {"x": deep}
    with pytest.raises(ProblemError) as nested:
        generate_files({**plan, "extra": deep}, ["all"], tmp_path)
    assert nested.value.error_json()["error"]["problems"][0]["path"] == "plan"


def test_check_request_merges_thresholds_and_refuses_bad_requests() -> None:
    with pytest.raises(ProblemError) as not_object:
        check_request([], {})
    assert not_object.value.problem.code == "BAD_REQUEST"
    request = {
        "model": {"source": "tiny", "family": "flux"},
        "outputDir": "out",
        "phases": [{"kind": "baseline"}],
        "thresholds": {"cachePsnrDb": 33.0},
    }
    checked = check_request(request, {"cachePsnrDb": 31.0, "ssimMin": 0.95})
    assert checked["thresholds"] == {"cachePsnrDb": 33.0, "ssimMin": 0.95}  # the request's win
    assert request["thresholds"] == {"cachePsnrDb": 33.0}  # the caller's copy is left alone
    with pytest.raises(ProblemError) as bad:
        check_request({**request, "phases": "all"}, {})
    assert bad.value.problem.code == "BAD_REQUEST"
    assert bad.value.problem.hint == "fix the request fields named above"


def test_runtime_missing_names_the_packages_and_the_interpreter() -> None:
    wire = missing_runtime(["torch", "cache_dit"], "/venv/bin/python").error_json()["error"]
    assert wire["code"] == "runtime-missing"
    assert "torch, cache-dit not installed" in wire["message"]
    assert wire["missing"] == ["torch", "cache_dit"]
    assert wire["interpreter"] == "/venv/bin/python"
    assert list(wire) == ["code", "message", "hint", "missing", "requirement", "interpreter"]
    assert "interpreter" not in missing_runtime(["torch"]).error_json()["error"]


# -- generation from a plan file: the CLI's `generate` -------------------------------------


def _answers_file(tmp_path: Path, **change: object) -> Path:
    path = tmp_path / "answers.json"
    path.write_text(json.dumps({**_answers(tmp_path / "demo_cdit.py"), **change}))
    return path


def _invalid(path: Path) -> ProblemError:
    with pytest.raises(ProblemError) as caught:
        planning.plan_from_file(path)
    assert caught.value.problem.code == "invalid-plan"
    return caught.value


def test_a_plan_file_of_answers_is_analyzed_built_and_checked(tmp_path: Path) -> None:
    plan = planning.plan_from_file(_answers_file(tmp_path))
    assert plan.model.transformer_class == DEMO_CLASS and plan.generates_cache
    # every refusal is a field problem: wrong JSON types, the analysis, the document itself
    (typed,) = _invalid(_answers_file(tmp_path, registerName=7)).parts or ()
    assert (typed.code, typed.path) == (FIELD, "registerName")
    gone = {"transformerClass": DEMO_CLASS, "sources": {"transformer": "gone.py"}}
    (analysis,) = _invalid(_answers_file(tmp_path, model=gone)).parts or ()
    assert (analysis.path, analysis.message) == (
        "model.sources.transformer",
        "gone.py: no such file",
    )
    (tmp_path / "plan.json").write_text("[1]")
    (document,) = _invalid(tmp_path / "plan.json").parts or ()
    assert (document.path, document.message) == ("", "expected an object, got an array")


def test_generation_failed_carries_what_codegen_computed(tmp_path: Path) -> None:
    plan = planning.plan_from_file(_answers_file(tmp_path))
    manifest = tmp_path / ".cdit" / "generated.json"
    away = generating.plan_file_workspace(tmp_path / "elsewhere" / "plan.json", "move it")
    with pytest.raises(generating.GenerationFailed) as outside:
        generating.prepare(plan, manifest, away)
    assert outside.value.problem.code == "generation-failed"
    assert [(p.code, p.path) for p in outside.value.parts or ()] == [(FIELD, "target")]
    assert outside.value.result.plan == plan  # what the CLI's --print-plan shows anyway

    written = generating.write_generated(generating.prepare(plan, manifest))
    assert written == [tmp_path / "demo_cdit.py"] and manifest.is_file()
    written[0].write_text(written[0].read_text() + "# mine\n")
    renamed = planning.checked_plan({**plan.to_json(), "modelSlug": "demo_two"})
    with pytest.raises(generating.GenerationFailed) as edited:
        generating.prepare(renamed, manifest)
    assert edited.value.problem.code == CONFLICT
    (conflict,) = edited.value.parts or ()
    assert conflict.message.startswith(f"{written[0]}: ")
    assert edited.value.result.to_json()["conflicts"]


def test_the_cli_prints_the_generate_services_problems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lsp_server import cli_generate

    answers = _answers_file(tmp_path, registerName=7, modelSlug=[])
    parts = _invalid(answers).parts or ()
    out, err = io.StringIO(), io.StringIO()
    assert cli_generate.run_generate(str(answers), out=out, err=err) == 2
    assert out.getvalue() == ""
    assert err.getvalue().splitlines() == [
        f"cdit-integrate: error: {p.path}: {p.message}" for p in parts
    ]
    # a build without code generation: one line, no traceback
    monkeypatch.setattr("lsp_server.services.codegen_module.codegen_module", lambda: None)
    err = io.StringIO()
    assert cli_generate.run_generate(str(answers), out=out, err=err) == 2
    assert err.getvalue() == f"cdit-integrate: error: {UNAVAILABLE.message}\n"
