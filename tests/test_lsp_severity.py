"""Diagnostic severities: hypothetical parallel sizes warn, and users choose per code.

A stock diffusers file must not turn red for CP/TP degrees taken from the default `cdit.cpSizes`
(2, 4, 8) that nobody asked to run: CDIT210 and CDIT301 warn by default, and
`cdit.diagnosticSeverity` sets any code's severity or turns it off, as linters do.
"""

from __future__ import annotations

from lsprotocol import types
from pygls.workspace import PositionCodec

from lsp_server.analysis.analyze import analyze_path
from lsp_server.features.diagnostics import DEFAULT_SEVERITY, build_diagnostics
from lsp_server.features.positions import LineIndex
from lsp_server.features.settings import parse_settings

MODULE = "diffusers.models.transformers.transformer_sana_video"


def _report() -> tuple[dict, str, LineIndex]:
    result = analyze_path(MODULE, "SanaVideoTransformer3DModel", None)
    report = result.to_json()
    path = report["source"]["path"]
    with open(path, encoding="utf-8") as handle:
        lines = LineIndex(handle.read(), PositionCodec(types.PositionEncodingKind.Utf16))
    return report, path, lines


def _codes(diagnostics: list[types.Diagnostic]) -> dict[str, set[types.DiagnosticSeverity]]:
    out: dict[str, set[types.DiagnosticSeverity]] = {}
    for d in diagnostics:
        out.setdefault(str(d.code), set()).add(d.severity)
    return out


def test_hypothetical_sizes_warn_and_the_user_decides() -> None:
    report, path, lines = _report()
    analysis = {d["code"]: d["severity"] for t in report["transformers"] for d in t["diagnostics"]}
    assert analysis.get("CDIT210") == "error"  # 20 heads on 8 ranks (a default size)
    default = _codes(build_diagnostics(report, path, lines))
    assert default["CDIT210"] == {types.DiagnosticSeverity.Warning}
    assert not any(types.DiagnosticSeverity.Error in s for s in default.values())
    chosen = _codes(build_diagnostics(report, path, lines, {"CDIT210": "error", "CDIT220": "off"}))
    assert chosen["CDIT210"] == {types.DiagnosticSeverity.Error}
    assert "CDIT220" in default and "CDIT220" not in chosen
    hinted = _codes(build_diagnostics(report, path, lines, {"CDIT202": "hint"}))
    assert hinted["CDIT202"] == {types.DiagnosticSeverity.Hint}
    assert set(DEFAULT_SEVERITY) == {"CDIT210", "CDIT301"}


def test_the_setting_is_parsed_with_its_problems() -> None:
    parsed = parse_settings(
        {"diagnosticSeverity": {"CDIT210": "error", "CDIT214": "off", "X": "error", "CDIT1": 3}}
    )
    assert dict(parsed.settings.diagnostic_severity) == {"CDIT210": "error", "CDIT214": "off"}
    assert len(parsed.problems) == 1 and "ignored" in parsed.problems[0]
    kept = parse_settings({"diagnosticSeverity": "loud"}, parsed.settings)
    assert kept.settings.diagnostic_severity == parsed.settings.diagnostic_severity
    assert kept.problems


def test_a_size_the_model_cannot_take_offers_the_sizes_that_fit() -> None:
    from types import SimpleNamespace

    from lsp_server.features.code_actions import SET_SIZES_COMMAND, _size_fixes
    from lsp_server.features.settings import Settings

    report, path, lines = _report()
    (cdit210,) = [d for d in build_diagnostics(report, path, lines) if d.code == "CDIT210"]
    assert cdit210.data["fix"] == {
        "setting": "cpSizes",
        "drop": [8],
        "fits": [2, 3, 4, 5, 7, 10, 20],
    }
    params = types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri="file:///x.py"),
        range=cdit210.range,
        context=types.CodeActionContext(diagnostics=[cdit210]),
    )
    ls = SimpleNamespace(settings=Settings(cp_sizes=(2, 4, 8)))
    (action,) = _size_fixes(ls, params)  # type: ignore[arg-type]
    assert action.kind == types.CodeActionKind.QuickFix
    assert action.command is not None and action.command.command == SET_SIZES_COMMAND
    assert action.command.arguments == [{"setting": "cpSizes", "sizes": [2, 4]}]
    # only for quick fixes, never for other kinds asked for
    params.context.only = [types.CodeActionKind.Source]
    assert _size_fixes(ls, params) == []  # type: ignore[arg-type]
