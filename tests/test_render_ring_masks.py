"""`render_ring_masks`: masked ring steps, one test per rule.

The install function and the ring entry point it writes are run against stand-ins for cache-dit's
attention registry and `torch.distributed` (no tensors): each ring step must get the mask columns
of the key shard it holds (rank `rank - step`, as cache-dit's P2P ring passes them) and this
rank's rows; calls without a mask go to cache-dit unchanged; installing twice is a no-op.
"""

from __future__ import annotations

import sys
import textwrap
from types import ModuleType, SimpleNamespace
from typing import Any, ClassVar

import pytest
from render_cases import WIDTH, assert_code, assert_parses, code, run_generated, top_level_names

from lsp_server.codegen.render_ring_masks import (
    RING_MASKS_FUNCTION,
    ring_masks_code,
    ring_masks_enable_lines,
)


def test_ring_requested_installs_the_masked_steps_and_refuses_usp() -> None:
    lines = ring_masks_enable_lines("config", "        ", WIDTH)
    assert_parses("\n".join(lines))
    assert_code(
        textwrap.dedent("\n".join(lines[:8]) + "\n"),
        code(
            """
                    if (config.ring_size or 1) > 1:
                        if (config.ulysses_size or 1) > 1:
                            raise NotImplementedError(
                                "ring and Ulysses together (USP) are not part of this "
                                "integration: the attention receives a mask, which this "
                                "module's ring steps serve under ring attention alone"
                            )
                        _ring_attention_masks()
            """
        ),
    )


def test_enable_lines_name_the_callers_config_at_its_indent() -> None:
    lines = ring_masks_enable_lines("parallelism_config", "\t", 200)
    assert lines[:2] == [
        "\tif (parallelism_config.ring_size or 1) > 1:",
        "\t    if (parallelism_config.ulysses_size or 1) > 1:",
    ]
    assert lines[2].startswith("\t        raise NotImplementedError(") and lines[3] == (
        f"\t    {RING_MASKS_FUNCTION}()"
    )


def test_ring_masks_code_defines_the_floor_the_step_and_the_install() -> None:
    text = ring_masks_code(WIDTH)
    assert_parses(text)
    names = top_level_names(text)
    assert names[-3:] == ["_RING_MASK_FLOOR", "_masked_attention_lse", RING_MASKS_FUNCTION]
    assert "_RING_MASK_FLOOR = -200.0  # the LSE of a shard whose keys are all masked\n" in text


class _Mask:
    """A mask stand-in that records the rows and columns taken from it."""

    def __init__(self, shape: tuple[int, ...], rows: tuple[int, int] | None = None) -> None:
        self.shape = shape
        self.rows = rows

    def dim(self) -> int:
        return len(self.shape)

    def __getitem__(self, key: tuple[Any, ...]) -> Any:
        if len(key) == 3:  # mask[..., rows, :]
            rows = key[1]
            shape = (*self.shape[:-2], rows.stop - rows.start, self.shape[-1])
            return _Mask(shape, rows=(rows.start, rows.stop))
        cols = key[1]  # mask[..., cols]
        return (self.rows, (cols.start, cols.stop))


class _Ring:
    """cache-dit's ring entry point: records the calls, runs the step op once per shard."""

    calls: ClassVar[list[tuple[Any, ...]]] = []

    @staticmethod
    def apply(*args: Any) -> Any:
        _Ring.calls.append(args)
        if len(args) > 9 and callable(args[9]) and args[9] is not _original_op:
            return [args[9](None, "q", "k", "v") for _ in range(2)]
        return "cache-dit"


def _original_op(*args: Any) -> None:
    """cache-dit's own step op (the masked entry point hands its calls on untouched)."""
    raise AssertionError("the original step op runs only for calls without a mask")


@pytest.fixture
def ring(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The generated code run against a fake `cache_dit.attention.backends.register` with
    `_Ring` registered, on rank 1 of a ring of 2."""
    register = SimpleNamespace(RingAttention=_Ring)
    backends = ModuleType("cache_dit.attention.backends")
    backends.register = register  # type: ignore[attr-defined]
    for name, module in (
        ("cache_dit", ModuleType("cache_dit")),
        ("cache_dit.attention", ModuleType("cache_dit.attention")),
        ("cache_dit.attention.backends", backends),
    ):
        monkeypatch.setitem(sys.modules, name, module)
    distributed = SimpleNamespace(get_world_size=lambda group: 2, get_rank=lambda group: 1)
    torch = SimpleNamespace(Tensor=object, distributed=distributed)
    scope = run_generated(ring_masks_code(WIDTH), torch=torch)
    if "_mask_for_keys" in scope:  # the key-mask adapter is tested on its own
        scope["_mask_for_keys"] = lambda mask, query, key, group: mask
    scope["_masked_attention_lse"] = lambda q, k, v, shard, scale: (shard, scale)
    _Ring.calls = []
    return {"scope": scope, "register": register}


def _args(mask: Any, s_q: int = 3, s_k: int = 3) -> tuple[Any, ...]:
    """cache-dit's ring `apply` arguments: q, k, v, mask, ..., scale at 6, the op at 9, config."""
    config = SimpleNamespace(_ring_mesh=SimpleNamespace(get_group=lambda: "group"))
    query, key = SimpleNamespace(shape=(1, s_q, 2, 4)), SimpleNamespace(shape=(1, s_k, 2, 4))
    return (query, key, "v", mask, 0.0, False, 0.125, False, False, _original_op, config)


def test_install_replaces_cache_dits_ring_entry_point_once(ring: dict[str, Any]) -> None:
    install = ring["scope"][RING_MASKS_FUNCTION]
    install()
    masked = ring["register"].RingAttention
    assert masked is not _Ring and masked._cdit_original is _Ring
    install()
    assert ring["register"].RingAttention is masked


def test_calls_without_a_mask_or_with_a_broadcast_mask_run_unchanged(ring: dict[str, Any]) -> None:
    ring["scope"][RING_MASKS_FUNCTION]()
    masked = ring["register"].RingAttention
    plain, broadcast = _args(None), _args(_Mask((1, 1, 6, 1)))
    assert masked.apply(*plain) == "cache-dit"
    assert masked.apply(*broadcast) == "cache-dit"
    assert _Ring.calls == [plain, broadcast]


def test_each_step_attends_with_the_columns_of_the_shard_it_holds(ring: dict[str, Any]) -> None:
    ring["scope"][RING_MASKS_FUNCTION]()
    args = _args(_Mask((1, 1, 6, 6)))
    steps = ring["register"].RingAttention.apply(*args)
    # rank 1 of 2: its query rows 3..6; step 0 holds its own keys (shard 1), step 1 shard 0
    assert steps == [(((3, 6), (3, 6)), 0.125), (((3, 6), (0, 3)), 0.125)]
    (call,) = _Ring.calls  # cache-dit's ring runs with the masked step op in place of its own
    assert call[:9] == args[:9] and call[9] is not _original_op and call[10:] == args[10:]


def test_a_mask_over_the_local_keys_only_is_an_error(ring: dict[str, Any]) -> None:
    ring["scope"][RING_MASKS_FUNCTION]()
    with pytest.raises(ValueError, match="covers 3 keys, not 2 equal shards of 3"):
        ring["register"].RingAttention.apply(*_args(_Mask((1, 1, 3, 3))))
