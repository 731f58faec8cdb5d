"""Every model of the suite, by name (the order of the table)."""

from __future__ import annotations

from . import (
    bria_fibo2,
    ideogram4,
    kandinsky6,
    latte,
    longcat_audio,
    motif_video,
    nucleus_moe,
    pixart_sigma,
    qwenimage21,
    sana_video,
    sana_wm,
)
from ._common import NewModel

MODELS: dict[str, NewModel] = {
    m.name: m
    for m in (
        longcat_audio.MODEL,
        kandinsky6.MODEL,
        sana_video.MODEL,
        motif_video.MODEL,
        latte.MODEL,
        nucleus_moe.MODEL,
        ideogram4.MODEL,
        bria_fibo2.MODEL,
        sana_wm.MODEL,
        qwenimage21.MODEL,
    )
}

# Models cache-dit already integrates, run by name only (not in the table's default run): checks
# of a generated part on a real pipeline, e.g. routed SDPA on PixArt-Sigma.
CHECKS: dict[str, NewModel] = {m.name: m for m in (pixart_sigma.MODEL,)}
