"""IntegrationPlan: round trip, field-level errors, the JSON Schema, register-name checks."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from cdit_runtime.contract.plan import TP_KEY, plan_schema
from cdit_runtime.contract.schema_check import validate
from lsp_server.codegen import generate, parse_plan

TOY_PLAN = Path(__file__).resolve().parent / "codegen_fixtures" / "toy" / "plan.json"


def _toy(**target: str) -> dict[str, Any]:
    text = TOY_PLAN.read_text().replace("{TOY}", "/src/toy.py")
    data = json.loads(text.replace("{TOY_VAE}", str(TOY_PLAN.parent / "toy_vae.py.txt")))
    data["target"] = target or {"kind": "standalone", "path": "/p/cdit_toy.py"}
    return data


def _errors(data: Any) -> dict[str, str]:
    """path -> its messages, joined with ` | `."""
    plan, errors = parse_plan(data)
    assert plan is None
    out: dict[str, str] = {}
    for e in errors:
        out[e.path] = f"{out[e.path]} | {e.message}" if e.path in out else e.message
    return out


def test_round_trip() -> None:
    plan, errors = parse_plan(_toy())
    assert plan is not None, errors
    again, errors = parse_plan(json.loads(json.dumps(plan.to_json())))
    assert again == plan, errors
    assert plan.class_prefix == "Toy"


def test_field_level_errors() -> None:
    data = _toy()
    data["schemaVersion"] = 7
    data["registerName"] = "not a name"
    data["modelSlug"] = "Bad-Slug"
    data["cache"]["blockLists"][1]["forwardPattern"] = "Pattern_9"
    data["cache"]["blockLists"][0]["checkNumOutputs"] = "yes"
    data["contextParallel"]["plan"]["blocks.*.x.*"] = {"gather_dim": "1"}
    data["tensorParallel"]["layers"]["blocks.*.attn.to_q"] = "diagonal"
    data["example"]["height"] = -4
    data["target"] = {"kind": "standalone", "path": "/p/not-importable.py"}
    errors = _errors(data)
    assert errors == {
        "schemaVersion": "unsupported version 7 (this tool reads 1)",
        "registerName": "'not a name' is not a Python identifier",
        "modelSlug": "'Bad-Slug' must be snake_case (a-z, 0-9, _), starting with a letter",
        "cache.blockLists[1].forwardPattern": (
            "'Pattern_9' is not one of Pattern_0, Pattern_1, Pattern_2, Pattern_3, Pattern_4, "
            "Pattern_5"
        ),
        "cache.blockLists[0].checkNumOutputs": "expected a boolean, got a string",
        "contextParallel.plan['blocks.*.x.*']": "module key may contain at most one `*` / `<each>`",
        "contextParallel.plan['blocks.*.x.*'].gather_dim": "expected an integer, got a string",
        "tensorParallel.layers['blocks.*.attn.to_q']": (
            "'diagonal' is not one of colwise, rowwise, colwise_replicate, rowwise_replicate_input"
        ),
        "example.height": "must be positive",
        "target.path": "'/p/not-importable.py' must name an importable module file (`name.py`)",
    }


def test_missing_sections_and_cross_field_rules() -> None:
    assert _errors([]) == {"": "expected an object, got an array"}
    errors = _errors({"schemaVersion": 1})
    assert {"model", "registerName", "modelSlug", "target", "cache"} <= set(errors)
    data = _toy(kind="cache-dit-checkout", root="/r")
    data["registerName"] = "Other"
    data["example"] = None
    errors = _errors(data)
    assert "is not a prefix of the transformer class" in errors["registerName"]
    assert errors["example"].startswith("is required for the cache-dit checkout")
    data = _toy(kind="cache-dit-checkout", root="/r")
    data["model"]["pipelineClass"] = "AcmePipeline"
    assert "`cache_dit.enable_cache(pipe)` would not find it" in _errors(data)["registerName"]
    data = _toy()
    data["cache"]["patchFunctor"]["reasons"] = []
    plan, errors = parse_plan(data)  # an error inside a part refuses that part only
    assert plan is not None and errors == []
    assert plan.refused == {
        "cache": ("cache.patchFunctor.reasons: a PatchFunctor needs at least one reason",)
    }
    assert not plan.generates_cache and plan.generates_cp and plan.generates_tp


def test_schema_describes_what_to_json_writes() -> None:
    """The schema generated from the contract's `PlanDocument` accepts what `to_json` writes
    and refuses a value outside its sets."""
    schema = plan_schema()
    plan, _ = parse_plan(_toy())
    assert plan is not None
    assert validate(plan.to_json(), schema, "PlanDocument") == []
    checkout, _ = parse_plan(_toy(kind="cache-dit-checkout", root="/r"))
    assert checkout is not None
    assert validate(checkout.to_json(), schema, "PlanDocument") == []
    json.dumps(schema)
    broken = copy.deepcopy(plan.to_json())
    broken["cache"]["blockLists"][0]["forwardPattern"] = "Pattern_7"
    broken["tensorParallel"]["layers"]["to_q"] = "colwise"
    broken["target"] = {"kind": "standalone"}
    broken["example"]["height"] = 0
    *problems, example = validate(broken, schema, "PlanDocument")
    assert problems == [
        "PlanDocument.target: missing required key 'path'",
        "PlanDocument.cache.blockLists[0].forwardPattern: 'Pattern_7' is not one of "
        "['Pattern_0', 'Pattern_1', 'Pattern_2', 'Pattern_3', 'Pattern_4', 'Pattern_5']",
        "PlanDocument.tensorParallel.layers: key 'to_q' does not match " + TP_KEY,
    ]
    assert example.startswith("PlanDocument.example: ")  # height 0: the object, or null
    assert example.endswith("matches none of the allowed forms")


# ----------------------------------------------------------------------------- registry names


def _checkout_plan(root: Path, register: str, cls: str, example: str = "new_model") -> Any:
    data = _toy(kind="cache-dit-checkout", root=str(root))
    data["registerName"] = register
    data["model"]["transformerClass"] = cls
    data["model"]["pipelineClass"] = None
    data["example"]["name"] = example
    plan, errors = parse_plan(data)
    assert plan is not None, errors
    return plan


def test_register_name_is_checked_against_every_prefix_both_ways(installed_checkout: Path) -> None:
    # A shadowed register name refuses the cache part (adapter, functor, CLI example) only.
    shadowed = generate(_checkout_plan(installed_checkout, "FluxNova", "FluxNovaTransformer"))
    assert shadowed.plan_errors == []
    assert shadowed.refused["cache"] == (
        "registerName: BlockAdapter 'FluxNova' is shadowed by the registered 'Flux' (first "
        "registered prefix wins): pick a name that does not start with it, or extend that "
        "registration",
    )
    assert set(shadowed.refused) == {"cache"}
    written = {
        c.path.relative_to(installed_checkout / "src" / "cache_dit").as_posix()
        for c in shadowed.edits.changes
    }
    assert "distributed/transformers/toy.py" in written  # CP and TP planners
    assert not any("block_adapters" in w or "patch_functors" in w for w in written)
    assert "_utils/examples.py" not in written
    assert any(w.startswith("cache not generated: registerName:") for w in shadowed.warnings)

    shadows = generate(_checkout_plan(installed_checkout, "Sky", "SkyReelsV2Nova"))
    refused = {part: " | ".join(reasons) for part, reasons in shadows.refused.items()}
    assert "is a prefix of the registered 'SkyReelsV2'" in refused["cache"]
    assert "context-parallel planner 'SkyReelsV2Nova' is shadowed" in refused["contextParallel"]
    assert "tensor-parallel planner 'SkyReelsV2Nova' is shadowed" in refused["tensorParallel"]
    # the text-encoder and VAE planners do not depend on those names
    written = {c.path.name for c in shadows.edits.changes}
    assert {"toy_text_encoder_model.py", "autoencoder_kl_toy.py"} <= written
    assert "toy.py" not in written and "adapters.py" not in written


def test_example_name_must_be_new(installed_checkout: Path) -> None:
    result = generate(_checkout_plan(installed_checkout, "Zorblax", "ZorblaxTransformer", "flux"))
    assert [(e.path, e.message) for e in result.plan_errors] == [
        ("example.name", "CLI example 'flux' is already registered")
    ]


def test_importing_codegen_does_no_work_and_no_heavy_imports() -> None:
    import subprocess
    import sys

    script = (
        "import sys, json\n"
        "import lsp_server.codegen, cdit_runtime.contract.plan\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    modules = {m.split(".")[0] for m in json.loads(done.stdout.strip().splitlines()[-1])}
    assert not modules & {"torch", "diffusers", "transformers", "cache_dit", "pygls", "lsprotocol"}
    assert done.stderr == ""
