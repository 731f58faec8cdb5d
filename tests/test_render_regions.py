"""`regions` (+ `edits.plan_edits`): generated regions inside files the generator does not own,
as libcst codemods in `CodemodTest` style, one test per rule.

`PutRegions` runs `put_region` for each region and then `add_imports`, as `edits.plan_edits`
does; every rule also checks that a second run changes nothing (idempotence). The layouts of
dict / list entries and `function_assign` are in `tests/test_codegen_codemods.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import libcst as cst
import pytest
from libcst.codemod import Codemod, CodemodContext, CodemodTest
from render_cases import code

from lsp_server.codegen.edits import FileSpec, plan_edits
from lsp_server.codegen.manifest import WHOLE_FILE, Manifest, sha256
from lsp_server.codegen.regions import (
    Anchor,
    ImportNeed,
    Region,
    RegionError,
    add_imports,
    normalized,
    put_region,
    region_code,
)

FACTORY = Region(
    id="def:acme_adapter",
    kind="def",
    name="acme_adapter",
    code='@BlockAdapterRegister.register("Acme")\ndef acme_adapter(pipe, **kwargs):\n  return 2\n',
    anchor=Anchor(decorator="BlockAdapterRegister.register"),
)
EXPORT = Region(
    id="assign:AcmePatchFunctor",
    kind="assign",
    name="AcmePatchFunctor",
    code='AcmePatchFunctor = _safe_import(".functor_acme", "AcmePatchFunctor")\n',
    anchor=Anchor(call="_safe_import", first_arg=".functor_"),
)


class PutRegions(Codemod):
    """Insert (or replace) `regions`, then add the imports they need."""

    def __init__(
        self,
        context: CodemodContext,
        regions: Sequence[Region],
        imports: Sequence[ImportNeed] = (),
        module_name: str | None = None,
    ) -> None:
        super().__init__(context)
        self.regions = regions
        self.imports = imports
        self.module_name = module_name

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        for region in self.regions:
            tree = put_region(tree, region)
        return add_imports(tree, self.imports, self.module_name)


class TestRegions(CodemodTest):
    TRANSFORM = PutRegions

    def assertIdempotent(self, before: str, after: str, *args: object, **kwargs: object) -> None:
        """`before` becomes `after`, and `after` stays as it is."""
        self.assertCodemod(before, after, *args, **kwargs)
        self.assertCodemod(after, after, *args, **kwargs)

    def test_factory_goes_after_the_last_registered_factory(self) -> None:
        self.assertIdempotent(
            """
            @BlockAdapterRegister.register("Flux")
            def flux_adapter(pipe, **kwargs):
              return 1


            def _relaxed_assert(a, b):
              pass
            """,
            """
            @BlockAdapterRegister.register("Flux")
            def flux_adapter(pipe, **kwargs):
              return 1


            @BlockAdapterRegister.register("Acme")
            def acme_adapter(pipe, **kwargs):
              return 2


            def _relaxed_assert(a, b):
              pass
            """,
            [FACTORY],
        )

    def test_factory_without_an_anchor_goes_to_the_end_in_the_files_indentation(self) -> None:
        # a file without indented code has libcst's default indentation (4 spaces)
        self.assertIdempotent(
            """
            import os
            """,
            """
            import os


            @BlockAdapterRegister.register("Acme")
            def acme_adapter(pipe, **kwargs):
                return 2
            """,
            [FACTORY],
        )

    def test_a_changed_factory_is_replaced_in_place(self) -> None:
        self.assertIdempotent(
            """
            @BlockAdapterRegister.register("Acme")
            def acme_adapter(pipe, **kwargs):
              return 1


            # keep me
            def other():
              pass
            """,
            """
            @BlockAdapterRegister.register("Acme")
            def acme_adapter(pipe, **kwargs):
              return 2


            # keep me
            def other():
              pass
            """,
            [FACTORY],
        )

    def test_export_goes_after_the_last_export_of_its_kind(self) -> None:
        self.assertIdempotent(
            """
            FluxPatchFunctor = _safe_import(".functor_flux", "FluxPatchFunctor")
            WanPatchFunctor = _safe_import(".functor_wan", "WanPatchFunctor")
            PatchFunctor = _safe_import(".functor_base", "PatchFunctor")
            helper = _safe_import(".utils", "helper")
            """,
            """
            FluxPatchFunctor = _safe_import(".functor_flux", "FluxPatchFunctor")
            WanPatchFunctor = _safe_import(".functor_wan", "WanPatchFunctor")
            PatchFunctor = _safe_import(".functor_base", "PatchFunctor")
            AcmePatchFunctor = _safe_import(".functor_acme", "AcmePatchFunctor")
            helper = _safe_import(".utils", "helper")
            """,
            [EXPORT],
        )

    def test_export_without_its_kind_follows_the_last_call_of_the_anchor(self) -> None:
        self.assertIdempotent(
            """
            helper = _safe_import(".utils", "helper")
            x = 1
            """,
            """
            helper = _safe_import(".utils", "helper")
            AcmePatchFunctor = _safe_import(".functor_acme", "AcmePatchFunctor")
            x = 1
            """,
            [EXPORT],
        )

    def test_tuple_entry_is_appended(self) -> None:
        region = Region(id="l", kind="list_entry", name="b", container="NAMES", code='"b"')
        self.assertIdempotent('NAMES = ("a",)\n', 'NAMES = ("a", "b",)\n', [region])

    def test_a_changed_dict_entry_is_replaced_with_its_comma(self) -> None:
        region = Region(id="e", kind="dict_entry", name="B", container="m", code='"B": "new"')
        self.assertIdempotent(
            """
            m = {
                "B": "old",  # mine
                "C": "c",
            }
            """,
            """
            m = {
                "B": "new",  # mine
                "C": "c",
            }
            """,
            [region],
        )

    def test_a_needed_name_joins_the_existing_import_of_its_module(self) -> None:
        needs = [ImportNeed("registers", "ExampleType", 1), ImportNeed("argparse")]
        self.assertIdempotent(
            """
            import os
            from .registers import Example

            x = 1
            """,
            """
            import os
            from .registers import ExampleType, Example
            import argparse

            x = 1
            """,
            [],
            needs,
            "cache_dit._utils.examples",
        )

    @pytest.mark.xfail(
        strict=True,
        reason="libcst's AddImportsVisitor resolves a relative ImportNeed against the module "
        "name: a missing `from ..forward_pattern import ForwardPattern` is added as "
        "`from cache_dit.caching.forward_pattern import ForwardPattern`",
    )
    def test_a_missing_relative_import_is_added_relative(self) -> None:
        needs = [ImportNeed("forward_pattern", "ForwardPattern", 2)]
        self.assertIdempotent(
            """
            from .block_adapters import BlockAdapter

            x = 1
            """,
            """
            from .block_adapters import BlockAdapter
            from ..forward_pattern import ForwardPattern

            x = 1
            """,
            [],
            needs,
            "cache_dit.caching.block_adapters.adapters",
        )

    def test_an_import_present_in_absolute_form_is_not_added_again(self) -> None:
        needs = [ImportNeed("forward_pattern", "ForwardPattern", 2)]
        self.assertCodemod(
            "from cache_dit.caching.forward_pattern import ForwardPattern\n",
            "from cache_dit.caching.forward_pattern import ForwardPattern\n",
            [],
            needs,
            "cache_dit.caching.block_adapters.adapters",
        )


@pytest.mark.parametrize(
    ("source", "region", "message"),
    [
        ("x = 1\n", Region("e", "dict_entry", "k", '"k": 1', container="m"), "`m` was not found"),
        ("m = f()\n", Region("e", "dict_entry", "k", '"k": 1', container="m"), "not a literal"),
        ("x = 1\n", Region("f", "function_assign", "A", "A = 1\n", container="act"), "`act`"),
    ],
    ids=["no-container", "not-a-literal", "no-function"],
)
def test_a_file_without_the_regions_container_is_an_error(
    source: str, region: Region, message: str
) -> None:
    with pytest.raises(RegionError, match=message):
        put_region(cst.parse_module(source), region)


def test_region_code_is_the_current_text_without_leading_lines() -> None:
    module = cst.parse_module('x = 1\n\n\n# note\nAcmePatchFunctor = _safe_import("a", "b")\n')
    assert region_code(module, EXPORT) == 'AcmePatchFunctor = _safe_import("a", "b")\n'
    assert region_code(cst.parse_module("x = 1\n"), EXPORT) is None
    assert normalized("\n\ndef f():\n  pass\n\n") == "def f():\n  pass\n"
    assert normalized('"k": 1') == '"k": 1'


# ----------------------------------------------------------------------------- plan_edits


def _whole(path: Path, text: str) -> FileSpec:
    return FileSpec(path=path, content=text, must_exist=False)


def test_a_new_file_is_created_and_recorded(tmp_path: Path) -> None:
    edits = plan_edits([_whole(tmp_path / "acme.py", "x = 1\n")], Manifest())
    (change,) = edits.changes
    assert change.created and change.regions == {WHOLE_FILE: sha256("x = 1\n")}


def test_an_identical_file_is_unchanged(tmp_path: Path) -> None:
    (tmp_path / "acme.py").write_text("x = 1\n")
    edits = plan_edits([_whole(tmp_path / "acme.py", "x = 1\n")], Manifest())
    assert edits.ok and edits.changes == [] and edits.unchanged == [tmp_path / "acme.py"]


def test_a_file_unchanged_since_generation_is_updated(tmp_path: Path) -> None:
    path = tmp_path / "acme.py"
    path.write_text("x = 1\n")
    manifest = Manifest()
    manifest.record(path, {WHOLE_FILE: sha256("x = 1\n")})
    (change,) = plan_edits([_whole(path, "x = 2\n")], manifest).changes
    assert (change.old, change.new) == ("x = 1\n", "x = 2\n")


def test_a_file_edited_since_generation_is_a_conflict(tmp_path: Path) -> None:
    path = tmp_path / "acme.py"
    path.write_text("x = 1  # mine\n")
    manifest = Manifest()
    manifest.record(path, {WHOLE_FILE: sha256("x = 1\n")})
    edits = plan_edits([_whole(path, "x = 2\n")], manifest)
    assert edits.changes == [] and [c.region for c in edits.conflicts] == [WHOLE_FILE]
    assert "changed since it was generated" in edits.conflicts[0].reason


def test_regions_are_inserted_with_their_imports_and_recorded(tmp_path: Path) -> None:
    path = tmp_path / "adapters.py"
    path.write_text(code("""
        import os


        def _relaxed_assert(a, b):
          pass
        """))  # fmt: skip
    region = Region(**{**FACTORY.__dict__, "imports": (ImportNeed("argparse"),)})
    spec = FileSpec(path=path, regions=(region,), module_name="pkg.adapters")
    (change,) = plan_edits([spec], Manifest()).changes
    assert change.new == code(
        """
        import os
        import argparse


        def _relaxed_assert(a, b):
          pass


        @BlockAdapterRegister.register("Acme")
        def acme_adapter(pipe, **kwargs):
          return 2
        """
    )
    assert change.regions == {region.id: sha256(normalized(FACTORY.code))}
    path.write_text(change.new)
    again = plan_edits([spec], Manifest())
    assert again.changes == [] and again.unchanged == [path]
