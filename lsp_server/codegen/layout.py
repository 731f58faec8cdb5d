"""Small line-layout helpers for generated code (4-space indentation, a width to stay within)."""

from __future__ import annotations

import textwrap

INDENT = "    "


def call(
    func: str,
    args: list[str],
    *,
    indent: str,
    width: int,
    prefix: str = "",
    suffix: str = "",
) -> list[str]:
    """`prefix func(args)suffix` on one line if it fits, else one argument per line."""
    one = f"{indent}{prefix}{func}({', '.join(args)}){suffix}"
    if len(one) <= width or not args:
        return [one]
    return [
        f"{indent}{prefix}{func}(",
        *(f"{indent}{INDENT}{arg}," for arg in args),
        f"{indent}){suffix}",
    ]


def comment(text: str, *, indent: str, width: int, tag: str = "") -> list[str]:
    """`# text` wrapped to `width` (continuation lines indented by two spaces)."""
    body = f"{tag}{text}" if tag else text
    room = max(width - len(indent) - 2, 30)
    lines = textwrap.wrap(body, width=room, break_long_words=False, break_on_hyphens=False)
    if not lines:
        return [f"{indent}#"]
    return [f"{indent}# {lines[0]}", *(f"{indent}#   {line}" for line in lines[1:])]


def docstring(text: str, *, indent: str, width: int) -> list[str]:
    """A docstring: one line if it fits, else a summary line plus wrapped paragraphs."""
    paragraphs = [p.strip() for p in text.strip().split("\n\n")]
    one = f'{indent}"""{paragraphs[0]}"""'
    if len(paragraphs) == 1 and len(one) <= width and "\n" not in paragraphs[0]:
        return [one]
    room = max(width - len(indent), 40)
    out: list[str] = []
    for i, para in enumerate(paragraphs):
        if i:
            out.append("")
        if para.startswith("- ") or "\n" in para:
            for item in para.splitlines():
                bullet = item.startswith("- ")
                wrapped = textwrap.wrap(
                    item,
                    width=room,
                    subsequent_indent="  " if bullet else "",
                    break_long_words=False,
                    break_on_hyphens=False,
                )
                out.extend(wrapped or [""])
        else:
            out.extend(
                textwrap.wrap(
                    para,
                    width=room - (3 if i == 0 else 0),
                    break_long_words=False,
                    break_on_hyphens=False,
                )
            )
    lines = [f'{indent}"""{out[0]}', *(f"{indent}{line}" if line else "" for line in out[1:])]
    lines.append(f'{indent}"""')
    return lines


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quote(text: str) -> str:
    """A double-quoted Python string literal (newlines and other control characters escaped)."""
    return '"' + "".join(_escape(c) for c in text) + '"'


def _escape(char: str) -> str:
    if char in _ESCAPES:
        return _ESCAPES[char]
    if char.isprintable():
        return char
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def module_expr(base: str, path: str) -> str:
    """Python expression for submodule `path` of `base` (`get_submodule` when it has indices)."""
    if not path:
        return base
    if any(part.isdigit() for part in path.split(".")):
        return f"{base}.get_submodule({quote(path)})"
    return f"{base}.{path}"


def string_pieces(text: str, *, indent: str, width: int) -> list[str]:
    """`text` as adjacent string literals, one per line, each line within `width`."""
    room = max(width - len(indent) - 2, 30)
    words = textwrap.wrap(
        text, width=room, break_long_words=False, break_on_hyphens=False, drop_whitespace=True
    )
    pieces = [w + " " for w in words[:-1]] + words[-1:]
    return [f"{indent}{quote(p)}" for p in pieces] or [f'{indent}""']


def raise_lines(exception: str, message: str, *, indent: str, width: int) -> list[str]:
    """`raise exception(message)`, on one line if it fits, else with the message wrapped."""
    one = f"{indent}raise {exception}({quote(message)})"
    if len(one) <= width:
        return [one]
    return [
        f"{indent}raise {exception}(",
        *string_pieces(message, indent=indent + INDENT, width=width),
        f"{indent})",
    ]
