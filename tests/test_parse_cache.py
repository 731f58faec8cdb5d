"""Parsing and name resolution kept within an analysis run: the collector-paused parse restores
the collector's state, and a resolver's kept answers follow the files they were read from."""

from __future__ import annotations

import ast
import gc
import os
from pathlib import Path

import pytest

from lsp_server.analysis.lazy_definitions import parse_quietly
from lsp_server.analysis.resolver import Resolver
from lsp_server.analysis.sources import clear_caches, read_source


@pytest.mark.parametrize("enabled", [True, False])
def test_parse_quietly_restores_the_collector(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        tree = parse_quietly("class A(B):\n    def f(self):\n        return 1\n", "m.py")
        assert ast.dump(tree, include_attributes=True) == ast.dump(
            ast.parse("class A(B):\n    def f(self):\n        return 1\n"), include_attributes=True
        )
        assert gc.isenabled() is enabled
        with pytest.raises(SyntaxError) as err:
            parse_quietly("def f(:\n", "broken.py")
        assert err.value.filename == "broken.py"
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def _write(path: Path, text: str, tick: int) -> None:
    path.write_text(text)
    os.utime(path, ns=(tick * 1_000_000_000, tick * 1_000_000_000))  # a distinct mtime


def test_resolver_keeps_answers_and_a_new_run_sees_a_changed_file(tmp_path: Path) -> None:
    clear_caches()
    base = tmp_path / "base.py"
    model = tmp_path / "model.py"
    _write(base, "class Base(Root):\n    def forward(self):\n        pass\n", 1)
    _write(model, "from base import Base\n\n\nclass Model(Base):\n    pass\n", 1)
    source = read_source(model)
    resolver = Resolver()
    cls = resolver.resolve_class(source, "Model")
    assert resolver.resolve_class(source, "Model") is cls
    (base_ref,) = resolver.bases(cls)
    assert base_ref.qualname == "base.Base"
    assert [a.name for a in resolver.mro(cls)] == ["Model", "Base", "Root"]
    assert [a.name for a in resolver.mro(cls)] == ["Model", "Base", "Root"]  # kept walk
    found = resolver.find_method(cls, "forward")
    assert found is not None and found[1].name == "Base"
    assert resolver.find_method(cls, "forward") is found
    assert resolver.find_method(cls, "missing") is None

    # an early stop does not keep a partial walk
    walk = resolver.iter_mro(resolver.resolve_class(source, "Base"))
    assert next(walk).name == "Base"
    walk.close()
    assert [a.name for a in resolver.mro(resolver.resolve_class(source, "Base"))] == [
        "Base",
        "Root",
    ]

    # the base file changes: the next run (a new resolver) reads it again
    _write(base, "class Base(Other):\n    def step(self):\n        pass\n", 2)
    fresh = Resolver()
    cls2 = fresh.resolve_class(read_source(model), "Model")
    assert [a.name for a in fresh.mro(cls2)] == ["Model", "Base", "Other"]
    assert fresh.find_method(cls2, "forward") is None
    step = fresh.find_method(cls2, "step")
    assert step is not None and step[0].name == "step"
    clear_caches()
