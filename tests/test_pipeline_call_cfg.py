"""`has_separate_cfg` decided for the call the user makes, not only the default path.

Pipelines whose unconditional call runs only with some arguments (QwenImage 2.1: `true_cfg_scale
> 1` and a negative prompt; Flux: `true_cfg_scale`) get one answer on the default path and another
for the call a user verifies. The analysis takes that call (`PipelineCall`: the request's keyword
arguments and the names of the inputs it loads from files), from the CLI's `--call-arg` /
`--input`, the answers' `run` and the editor's run configuration.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import PipelineCall, analyze_path
from lsp_server.analysis.pipeline import infer_separate_cfg
from lsp_server.services.plan import complete_answers

# An invented serving-framework pipeline: no diffusers base class, the second call gated by a
# scale and an optional negative context, and a mode compared by value.
_SERVING = """
class Sampler:
    def __init__(self, dit, schedule):
        self.dit = dit
        self.schedule = schedule

    def __call__(self, latents, context, uncond_context=None, cfg_scale=1.0, mode="euler",
                 steps=8):
        use_cfg = cfg_scale > 1.0 and uncond_context is not None
        for t in self.schedule.timesteps(steps):
            eps = self.dit(latents, t, context)
            if use_cfg:
                eps_u = self.dit(latents, t, uncond_context)
                eps = eps_u + cfg_scale * (eps - eps_u)
            if mode == uncond_context:
                eps = -eps
            latents = self.schedule.step(eps, t, latents)
        return latents
"""


def _serving(tmp_path: Path) -> Path:
    path = tmp_path / "sampler.py"
    path.write_text(textwrap.dedent(_SERVING))
    return path


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (None, False),  # default path: cfg_scale 1.0
        (PipelineCall({"cfg_scale": 4.0}, ("uncond_context",)), True),
        (PipelineCall({"cfg_scale": 4.0}), False),  # no negative context: one call
        (PipelineCall({"cfg_scale": 1.0}, ("uncond_context",)), False),
        (PipelineCall({"cfg_scale": 4.0, "uncond_context": [1, 2]}), True),  # an object: given
    ],
)
def test_the_second_call_is_decided_for_the_call_given(
    call: PipelineCall | None, expected: bool, tmp_path: Path
) -> None:
    result = infer_separate_cfg(_serving(tmp_path), call_args=call.values() if call else None)
    assert result.value is expected
    messages = [e.message for e in result.evidence]
    if call is None:
        assert result.call_arguments is None
        assert not any("call arguments given" in m for m in messages)
    else:
        assert result.call_arguments == tuple(sorted(call.values()))
        assert messages[0].startswith("decided for the call arguments given (")
        assert not any("default path" in m for m in messages)


def test_a_given_input_compared_by_value_stays_unknown(tmp_path: Path) -> None:
    """`GIVEN` is not None, and nothing else: `mode == uncond_context` is not decided by it."""
    from lsp_server.analysis.pipeline.values import GIVEN, truth

    assert truth(GIVEN) is None
    path = tmp_path / "p.py"
    path.write_text(
        textwrap.dedent(
            """
            class P:
                def __init__(self, transformer, scheduler):
                    self.transformer, self.scheduler = transformer, scheduler

                def __call__(self, x, neg=None, style="a"):
                    for t in self.scheduler.timesteps:
                        y = self.transformer(x, t)
                        if neg == style:
                            y = y - self.transformer(x, t)
                        x = self.scheduler.step(y, t, x)
                    return x
            """
        )
    )
    result = infer_separate_cfg(path, call_args=PipelineCall({}, ("neg",)).values())
    # a call that may run (unknown guard) counts: two calls, with the lower confidence
    assert result.value is True and result.confidence == 0.7


def _qwen21_pipeline() -> Path:
    diffusers = pytest.importorskip("diffusers")
    path = Path(diffusers.__file__).parent / "pipelines" / "qwenimage21" / "pipeline_qwenimage21.py"
    if not path.is_file():
        pytest.skip("diffusers without QwenImage 2.1")
    return path


def test_qwenimage21_true_cfg_needs_the_scale_and_a_negative_prompt() -> None:
    pipeline = _qwen21_pipeline()
    transformer = "diffusers.models.transformers.transformer_qwenimage21"

    def separate(call: PipelineCall | None) -> Any:
        result = analyze_path(transformer, None, pipeline, registry=False, call=call)
        return result.to_json()["transformers"][0]["separateCfg"]

    assert separate(None)["value"] is False and "callArguments" not in separate(None)
    told = separate(PipelineCall({"true_cfg_scale": 4.0}, ("negative_prompt_embeds",)))
    assert told["value"] is True
    assert told["callArguments"] == ["negative_prompt_embeds", "true_cfg_scale"]
    assert separate(PipelineCall({"true_cfg_scale": 4.0}))["value"] is False


def test_the_answers_run_section_decides_the_plans_flag(tmp_path: Path) -> None:
    pipeline = _qwen21_pipeline()
    answers: dict[str, Any] = {
        "model": {
            "transformerClass": "QwenImage21Transformer2DModel",
            "sources": {
                "transformer": "diffusers.models.transformers.transformer_qwenimage21",
                "pipeline": str(pipeline),
            },
        },
        "target": {"kind": "standalone", "path": str(tmp_path / "q21.py")},
    }
    assert complete_answers(answers)["cache"]["hasSeparateCfg"] is False
    answers["run"] = {
        "callArgs": {"true_cfg_scale": 4.0},
        "inputs": {"negative_prompt_embeds": str(tmp_path / "neg.npy")},
    }
    assert complete_answers(answers)["cache"]["hasSeparateCfg"] is True


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lsp_server.cli", "analyze", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_cli_takes_the_call_with_verifys_flags(tmp_path: Path) -> None:
    model = Path(__file__).parent / "fixtures" / "models" / "third_party" / "sit_dit.py"
    pipeline = _serving(tmp_path)
    done = _cli(
        str(model),
        "--pipeline",
        str(pipeline),
        "--no-registry",
        "--json",
        "--call-arg",
        "cfg_scale=3.5",
        "--input",
        f"uncond_context={tmp_path / 'u.npy'}",
    )
    assert done.returncode == 0, done.stderr
    separate = json.loads(done.stdout)["transformers"][0]["separateCfg"]
    assert separate["value"] is True
    assert separate["callArguments"] == ["cfg_scale", "uncond_context"]
    bad = _cli(str(model), "--call-arg", "cfg_scale")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "--call-arg 'cfg_scale'" in bad.stderr
    bad = _cli(str(model), "--call-arg", "cfg_scale=high")
    assert bad.returncode == 2 and "is not JSON" in bad.stderr
