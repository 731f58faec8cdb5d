"""The runtime's JSON contract: schema file, request loading, round trips, stdlib-only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cdit_runtime import contract
from cdit_runtime.contract import (
    SCHEMA_FILE,
    ContractError,
    PhaseResult,
    PhaseSpec,
    ProgressEvent,
    Thresholds,
    VerificationResult,
    from_json,
    json_schema,
    load_request,
    schema_text,
    to_json,
)
from cdit_runtime.contract.schema_check import validate


def test_schema_file_is_generated_from_the_dataclasses() -> None:
    assert SCHEMA_FILE.read_text() == schema_text(), (
        "regenerate: python -m cdit_runtime schema --write "
        "cdit_runtime/contract/verification.schema.json"
    )


def test_thresholds_are_defined_once_as_schema_defaults() -> None:
    props = json_schema()["$defs"]["Thresholds"]["properties"]
    assert props["cachePsnrDb"]["default"] == 30.0
    assert props["cacheWarnPsnrDb"]["default"] == 25.0
    assert props["parallelPsnrDb"]["default"] == 35.0
    assert props["ssimMin"]["default"] == 0.90
    assert props["garbledSsimBelow"]["default"] == 0.5
    assert Thresholds().parallel_psnr_db == props["parallelPsnrDb"]["default"]


def test_cache_defaults_are_the_cache_dit_cli_defaults() -> None:
    props = json_schema()["$defs"]["CacheOptions"]["properties"]
    got = {k: v["default"] for k, v in props.items()}
    assert got == {
        "fn": 1,
        "bn": 0,
        "residualDiffThreshold": 0.12,
        "maxWarmupSteps": 8,
        "warmupInterval": 1,
        "maxCachedSteps": -1,
        "maxContinuousCachedSteps": 3,
        "calibrateShare": None,
        "control": True,
    }


def test_request_round_trip_and_phase_ids() -> None:
    data = {
        "model": {"source": "local", "path": "/models/flux"},
        "outputDir": "/tmp/out",
        "integration": {"kind": "standalone", "path": "/w/gen.py"},
        "phases": [
            {"kind": "baseline"},
            {"kind": "cache"},
            {"kind": "ulysses", "size": 4},
            {"kind": "vae_p", "vaeBase": "ulysses"},
            {"kind": "hybrid"},
        ],
        "cache": {"fn": 2, "residualDiffThreshold": 0.2},
        "steps": 28,
    }
    request = load_request(data)
    assert [p.id for p in request.phases] == [
        "baseline",
        "cache",
        "ulysses-4",
        "vae_p-ulysses2",
        "hybrid-u2-tp2",
    ]
    assert [p.world_size for p in request.phases] == [1, 1, 4, 2, 4]
    assert request.cache.fn == 2 and request.cache.bn == 0
    again = to_json(request)
    assert validate(again, json_schema(), "VerificationRequest") == []
    assert load_request(again) == request


def test_the_integration_kinds_are_the_generators_target_kinds() -> None:
    """One name per target: `cache-dit-checkout`, as in the plan. A saved request with the earlier
    `checkout` still loads, as `cache-dit-checkout`, and is written back with the current name."""
    import typing

    plan_model = pytest.importorskip("lsp_server.codegen.plan_model")
    kinds = typing.get_args(typing.get_type_hints(contract.Integration)["kind"])
    assert kinds == plan_model.TARGET_KINDS
    data = {"model": {"source": "tiny", "family": "flux"}, "outputDir": "/o"}
    assert load_request(data).integration.kind == "cache-dit-checkout"  # the default
    old = load_request({**data, "integration": {"kind": "checkout", "path": "/src/cache-dit"}})
    assert old.integration == contract.Integration("cache-dit-checkout", "/src/cache-dit")
    assert to_json(old)["integration"] == {"kind": "cache-dit-checkout", "path": "/src/cache-dit"}
    with pytest.raises(ContractError, match="is not one of"):
        load_request({**data, "integration": {"kind": "cache-dit"}})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"model": {"source": "tiny"}, "outputDir": "/o"}, "needs a family"),
        ({"model": {"source": "local"}, "outputDir": "/o"}, "needs a path"),
        ({"model": {"source": "tiny", "family": "flux"}}, "missing required key 'outputDir'"),
        (
            {
                "model": {"source": "tiny", "family": "flux"},
                "outputDir": "/o",
                "phases": [{"kind": "x"}],
            },
            "is not one of",
        ),
        (
            {"model": {"source": "tiny", "family": "flux"}, "outputDir": "/o", "speed": 1},
            "unknown key 'speed'",
        ),
        (
            {
                "model": {"source": "tiny", "family": "flux"},
                "outputDir": "/o",
                "phases": [{"kind": "ulysses"}, {"kind": "ulysses"}],
            },
            "duplicate phase ids",
        ),
    ],
)
def test_bad_requests_are_rejected_with_a_readable_message(data: dict, message: str) -> None:
    with pytest.raises(ContractError, match=message):
        load_request(data)


def test_result_with_inf_psnr_validates_and_round_trips() -> None:
    result = VerificationResult(
        status="completed",
        output_dir="/o",
        phases=[
            PhaseResult(name="baseline", kind="baseline", status="ok", verdict="reference"),
            PhaseResult(
                name="ulysses-2", kind="ulysses", status="ok", psnr_db=float("inf"), ssim=1.0
            ),
        ],
    )
    data = json.loads(json.dumps(to_json(result)))
    assert data["phases"][1]["psnrDb"] == "inf"
    assert validate(data, json_schema(), "VerificationResult") == []
    back = from_json(VerificationResult, data)
    assert back.phases[1].psnr_db == "inf"


def test_progress_event_validates() -> None:
    event = to_json(ProgressEvent(event="step", time=1.0, phase="cache", step=3, total=28))
    assert validate(event, json_schema(), "ProgressEvent") == []
    assert validate({"event": "nope", "time": 1}, json_schema(), "ProgressEvent")


def test_phase_spec_defaults() -> None:
    assert PhaseSpec("tp").id == "tp-2"
    assert PhaseSpec("ulysses", cache=True).id == "ulysses-2-cache"


def test_contract_is_standard_library_only() -> None:
    code = (
        "import sys, cdit_runtime.contract, cdit_runtime.contract.schema_check, cdit_runtime.cli;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'torch','numpy','diffusers','cache_dit','transformers','skimage'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert Path(contract.__file__).parent.name == "contract"
