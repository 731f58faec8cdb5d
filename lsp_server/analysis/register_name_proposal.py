"""Proposing a BlockAdapter register name from the class names' structure only (their
CamelCase words), never from a table of model names."""

from __future__ import annotations

import re

# CamelCase words: acronyms before a capitalized word ("LTX|Video"), capitalized words, bare
# acronyms ("SD", "T"), digit runs, then anything else as separators.
_WORD_PATTERN = r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^A-Za-z\d]+"
# Trailing words removed from a transformer class name to propose a register name.
_GENERIC_SUFFIXES = ("Transformer", "Model", "2D", "3D", "1D", "DiT", "Dit", "Pipeline")


def _words(name: str) -> list[str]:
    return re.findall(_WORD_PATTERN, name)


def _strip_generic_suffixes(name: str) -> str:
    changed = True
    while changed:
        changed = False
        boundaries = set()
        offset = 0
        for word in _words(name):
            boundaries.add(offset)
            offset += len(word)
        for suffix in _GENERIC_SUFFIXES:
            cut = len(name) - len(suffix)
            if not (cut > 0 and name.endswith(suffix) and cut in boundaries):
                continue
            if suffix.startswith("Di") and name[cut - 1].isupper():
                continue  # an acronym glued to DiT is part of it: "MMDiT", "UDiT"
            name = name[:cut].rstrip("_")
            changed = True
            break
    return name


def propose_register_name(transformer_class: str, pipeline_class: str | None = None) -> str:
    """A BlockAdapter register name derived from the class names' structure only.

    With a pipeline class: the longest common leading run of CamelCase words of both classes
    (``Krea2Pipeline`` + ``Krea2Transformer2DModel`` -> ``Krea2``), so the name prefixes both. If
    they share no leading word, the pipeline class without its ``Pipeline`` suffix. Without a
    pipeline class: the transformer class without trailing ``Transformer``/``Model``/``2D``/
    ``3D``/``DiT`` words (``AcmeVidTransformer3DModel`` -> ``AcmeVid``).
    """
    if pipeline_class:
        common: list[str] = []
        for a, b in zip(_words(transformer_class), _words(pipeline_class), strict=False):
            if a != b:
                # Where acronyms meet ("DiT2D" vs "DiTPAG" -> "T" vs "TPAG") the word boundary is
                # ambiguous: keep the shared upper-case part.
                short, long = sorted((a, b), key=len)
                if short.isupper() and long.isupper() and long.startswith(short):
                    common.append(short)
                break
            common.append(a)
        name = "".join(common).rstrip("_")
        if name:
            return name
        stripped = (
            pipeline_class[: -len("Pipeline")]
            if pipeline_class.endswith("Pipeline")
            else pipeline_class
        )
        return stripped or pipeline_class
    return _strip_generic_suffixes(transformer_class) or transformer_class
