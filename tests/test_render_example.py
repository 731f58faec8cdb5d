"""`render_example`: the `cache_dit.generate` CLI example (checkout target), one test per rule."""

from __future__ import annotations

from pathlib import Path

from render_cases import MODEL, WIDTH, acme_plan, assert_code, assert_delta, assert_parses, code

from lsp_server.codegen.plan import ExamplePlan, IntegrationPlan, Sources
from lsp_server.codegen.render_example import env_entry, example_default, example_function

EXAMPLE = ExamplePlan(name="acme", env_var="ACME_DIR")


def _plan(example: ExamplePlan = EXAMPLE, **model: object) -> IntegrationPlan:
    model = {"default_model_id": "acme-org/Acme-1", **model}
    return acme_plan(example=example, **model)


def _example(plan: IntegrationPlan) -> str:
    return example_function(plan, "acme_example", WIDTH)


def test_text_to_image_example_registers_the_default_model() -> None:
    assert_code(
        _example(_plan()),
        code(
            """
            @ExampleRegister.register("acme", default="acme-org/Acme-1")
            def acme_example(args: argparse.Namespace, **kwargs) -> Example:
                from diffusers import DiffusionPipeline

                return Example(
                    args=args,
                    init_config=ExampleInitConfig(
                        task_type=ExampleType.T2I,
                        model_name_or_path=_path("acme-org/Acme-1"),
                        pipeline_class=DiffusionPipeline,
                    ),
                    input_data=ExampleInputData(
                        prompt="A cat holding a sign that says hello world",
                    ),
                )
            """
        ),
    )


def test_an_image_task_loads_the_input_image() -> None:
    assert_delta(
        _example(_plan()),
        _example(_plan(ExamplePlan(name="acme", env_var="ACME_DIR", task_type="I2V"))),
        code(
            """
            @@

            +    # CDIT-REVIEW: this task needs an input image; pass --image-path
            +    image = None
            +    if args.image_path is not None:
            +        image = load_image(args.image_path).convert("RGB")
            +
                 return Example(
            @@
                     init_config=ExampleInitConfig(
            -            task_type=ExampleType.T2I,
            +            task_type=ExampleType.I2V,
                         model_name_or_path=_path("acme-org/Acme-1"),
            @@
                         prompt="A cat holding a sign that says hello world",
            +            image=image,
                     ),
            """
        ),
    )


def test_the_inputs_the_plan_sets_are_passed_in_order() -> None:
    example = ExamplePlan(
        name="acme",
        env_var="ACME_DIR",
        prompt='A "quoted" prompt',
        height=480,
        width=832,
        num_frames=81,
        num_inference_steps=30,
        guidance_scale=5.0,
    )
    assert_delta(
        _example(_plan()),
        _example(_plan(example)),
        code(
            """
            @@
                     input_data=ExampleInputData(
            -            prompt="A cat holding a sign that says hello world",
            +            prompt="A \\"quoted\\" prompt",
            +            height=480,
            +            width=832,
            +            num_frames=81,
            +            num_inference_steps=30,
            +            guidance_scale=5.0,
                     ),
            """
        ),
    )


def test_separate_cfg_is_passed_to_the_optimization_when_set() -> None:
    example = ExamplePlan(name="acme", env_var="ACME_DIR", enable_separate_cfg=False)
    assert_delta(
        _example(_plan()),
        _example(_plan(example)),
        code(
            """
            @@
                         pipeline_class=DiffusionPipeline,
            +            extra_optimize_kwargs={
            +                "enable_separate_cfg": False,
            +            },
                     ),
            """
        ),
    )


def test_the_default_is_the_model_id_else_the_local_path() -> None:
    assert example_default(_plan(local_path="/models/acme")) == "acme-org/Acme-1"
    local = _plan(default_model_id=None, local_path="/models/acme")
    assert example_default(local) == "/models/acme"
    assert env_entry(local) == '"ACME_DIR": "/models/acme"'
    assert '@ExampleRegister.register("acme", default="/models/acme")' in _example(local)
    assert example_default(_plan(default_model_id=None)) == ""


def test_env_entry_maps_the_variable_to_the_default() -> None:
    assert_code("{" + env_entry(_plan()) + "}\n", '{"ACME_DIR": "acme-org/Acme-1"}\n')


def test_a_diffusers_pipeline_is_imported_from_diffusers() -> None:
    sources = Sources(MODEL.sources.transformer, pipeline="diffusers.pipelines.flux.pipeline_flux")
    plan = _plan(pipeline_class="FluxPipeline", sources=sources)
    assert "    from diffusers import FluxPipeline\n" in _example(plan)
    assert "            pipeline_class=FluxPipeline,\n" in _example(plan)


def test_a_pipeline_without_a_source_is_imported_from_diffusers() -> None:
    plan = _plan(pipeline_class="AcmePipeline")
    assert "    from diffusers import AcmePipeline\n" in _example(plan)


def test_a_pipeline_of_its_own_package_is_imported_from_its_module(tmp_path: Path) -> None:
    package = tmp_path / "acme_models"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "pipeline_acme.py").write_text("class AcmePipeline:\n    pass\n")
    sources = Sources(MODEL.sources.transformer, pipeline=str(package / "pipeline_acme.py"))
    plan = _plan(pipeline_class="AcmePipeline", sources=sources)
    assert "    from acme_models.pipeline_acme import AcmePipeline\n" in _example(plan)


def test_a_prompt_with_a_newline_stays_one_string_literal() -> None:
    example = ExamplePlan(name="acme", env_var="ACME_DIR", prompt="A cat\nholding a sign")
    assert_parses(_example(_plan(example)))
