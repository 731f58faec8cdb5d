"""How the target repository formats Python, and formatting generated snippets that way.

`detect_style(directory)` walks up from a directory to the nearest formatter/linter configuration
(`pyproject.toml` [tool.ruff] / [tool.black] / [tool.yapf], `ruff.toml`, `.style.yapf`,
`setup.cfg` / `tox.ini` [yapf] / [flake8] / [pycodestyle]) and reads the line length, the indent
width and the configured formatter. Without any configuration: PEP 8 (4 spaces, 79 columns).

`format_snippet(code, style)` formats code that the generator wrote in 4-space layout:

1. the configured formatter when it can be run here (ruff on PATH or next to the interpreter,
   black or yapf importable), with the repository's own configuration;
2. else ruff, when available, with the detected line length and indent width;
3. else a token-aware re-indentation to the detected indent width (strings are left alone).

Only generated snippets are formatted; code already in the target files is never touched.
"""

from __future__ import annotations

import ast
import configparser
import io
import re
import shutil
import subprocess
import sys
import tokenize
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

Formatter = Literal["ruff", "black", "yapf", "builtin"]

PEP8_LINE_LENGTH = 79
_STOP_MARKERS = (".git", ".hg")


@dataclass(frozen=True)
class CodeStyle:
    """Line length, indentation and formatter of a target; `source` says where they came from."""

    line_length: int = PEP8_LINE_LENGTH
    indent: str = "    "
    formatter: Formatter = "builtin"
    config_path: str | None = None
    source: str = "PEP 8 default (no formatter configuration found)"
    allow_external: bool = True  # run ruff/black/yapf when available

    def with_indent(self, indent: str) -> CodeStyle:
        return replace(self, indent=indent)


def detect_style(directory: str | Path) -> CodeStyle:
    """The formatting configuration that applies to files in `directory`."""
    here = Path(directory).resolve()
    for folder in (here, *here.parents):
        style = _style_in(folder)
        if style is not None:
            return style
        if any((folder / marker).exists() for marker in _STOP_MARKERS):
            break
    return CodeStyle()


def _style_in(folder: Path) -> CodeStyle | None:
    pyproject = folder / "pyproject.toml"
    if pyproject.is_file():
        style = _from_pyproject(pyproject)
        if style is not None:
            return style
    for name in ("ruff.toml", ".ruff.toml"):
        path = folder / name
        if path.is_file():
            data = _load_toml(path)
            return _ruff_style(data, path)
    yapf = folder / ".style.yapf"
    if yapf.is_file():
        return _yapf_ini(yapf, "style")
    for name in ("setup.cfg", "tox.ini"):
        path = folder / name
        if path.is_file():
            style = _from_ini(path)
            if style is not None:
                return style
    return None


def _load_toml(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        return _toml_fallback(text)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {}


def _toml_fallback(text: str) -> dict[str, Any]:
    """Enough of TOML for `[tool.x]` tables with integer settings (Python 3.10 without tomllib)."""
    data: dict[str, Any] = {}
    table: dict[str, Any] = data
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        header = re.match(r"^\[([^\[\]]+)\]$", line)
        if header:
            table = data
            for part in header.group(1).strip().split("."):
                table = table.setdefault(part.strip().strip('"'), {})
            continue
        setting = re.match(r"^([A-Za-z0-9_\-]+)\s*=\s*(.+)$", line)
        if setting:
            value = setting.group(2).strip()
            table[setting.group(1)] = int(value) if value.isdigit() else value.strip("\"'")
    return data


def _from_pyproject(path: Path) -> CodeStyle | None:
    tool = _load_toml(path).get("tool", {})
    if not isinstance(tool, dict):
        return None
    if isinstance(tool.get("ruff"), dict):
        return _ruff_style(tool["ruff"], path)
    black = tool.get("black")
    if isinstance(black, dict):
        return CodeStyle(
            line_length=_int(black.get("line-length"), 88),
            indent="    ",
            formatter="black",
            config_path=str(path),
            source=f"{path} [tool.black]",
        )
    yapf = tool.get("yapf")
    if isinstance(yapf, dict):
        return _yapf_style(yapf, path, f"{path} [tool.yapf]")
    return None


def _ruff_style(ruff: dict[str, Any], path: Path) -> CodeStyle:
    fmt = ruff.get("format", {}) if isinstance(ruff.get("format"), dict) else {}
    width = _int(fmt.get("indent-width", ruff.get("indent-width")), 4)
    return CodeStyle(
        line_length=_int(ruff.get("line-length"), 88),
        indent=" " * width,
        formatter="ruff",
        config_path=str(path),
        source=f"{path} (ruff)",
    )


def _yapf_style(settings: dict[str, Any], path: Path, source: str) -> CodeStyle:
    based_on = str(settings.get("based_on_style", "pep8")).lower()
    default_width = 2 if based_on == "chromium" else 4
    default_limit = 80 if based_on in ("google", "yapf", "chromium") else PEP8_LINE_LENGTH
    return CodeStyle(
        line_length=_int(settings.get("column_limit"), default_limit),
        indent=" " * _int(settings.get("indent_width"), default_width),
        formatter="yapf",
        config_path=str(path),
        source=source,
    )


def _yapf_ini(path: Path, section: str) -> CodeStyle:
    parser = configparser.ConfigParser()
    try:
        parser.read(path, encoding="utf-8")
    except configparser.Error:
        return CodeStyle(formatter="yapf", config_path=str(path), source=str(path))
    settings = dict(parser[section]) if parser.has_section(section) else {}
    return _yapf_style(settings, path, f"{path} [{section}]")


def _from_ini(path: Path) -> CodeStyle | None:
    parser = configparser.ConfigParser()
    try:
        parser.read(path, encoding="utf-8")
    except configparser.Error:
        return None
    if parser.has_section("yapf"):
        return _yapf_ini(path, "yapf")
    for section in ("flake8", "pycodestyle"):
        if parser.has_section(section) and parser[section].get("max-line-length"):
            return CodeStyle(
                line_length=_int(parser[section].get("max-line-length"), PEP8_LINE_LENGTH),
                source=f"{path} [{section}]",
            )
    return None


def _int(value: Any, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


# ----------------------------------------------------------------------------- formatting


def find_ruff() -> str | None:
    """The ruff executable next to the running interpreter, or on PATH."""
    local = Path(sys.executable).parent / ("ruff.exe" if sys.platform == "win32" else "ruff")
    if local.is_file():
        return str(local)
    return shutil.which("ruff")


def format_snippet(code: str, style: CodeStyle, *, filename: str | None = None) -> str:
    """Format generated 4-space `code` the way `style` says; returns the code unchanged on error."""
    if style.allow_external:
        formatted = _external(code, style, filename)
        if formatted is not None:
            return formatted
    return reindent(code, style.indent)


def _external(code: str, style: CodeStyle, filename: str | None) -> str | None:
    if style.formatter == "black":
        try:
            import black
        except ImportError:
            pass
        else:
            try:
                return black.format_str(code, mode=black.Mode(line_length=style.line_length))
            except Exception:  # black raises its own error types on unparsable input
                return None
    if style.formatter == "yapf":
        try:
            from yapf.yapflib.yapf_api import FormatCode
        except ImportError:
            pass
        else:
            try:
                return FormatCode(code, style_config=style.config_path)[0]
            except Exception:  # yapf raises its own error types
                return None
    ruff = find_ruff()
    if ruff is None:
        return None
    if style.formatter == "ruff" and style.config_path and filename:
        command = [ruff, "format", "--stdin-filename", filename, "-"]
    else:
        command = [
            ruff,
            "format",
            "--isolated",
            "--line-length",
            str(style.line_length),
            "--config",
            f"indent-width={len(style.indent.expandtabs(4)) or 4}",
            "-",
        ]
    try:
        done = subprocess.run(
            command,
            input=code,
            capture_output=True,
            text=True,
            timeout=30,
            cwd=str(Path(style.config_path).parent) if style.config_path else None,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    if style.indent == "\t" or len(style.indent) in (2, 4, 8):
        return done.stdout
    return reindent(done.stdout, style.indent)


def reindent(code: str, indent: str, *, source_width: int = 4) -> str:
    """Scale the leading indentation of `code` (written with `source_width` spaces per level).

    Lines inside multi-line strings keep their text, except docstrings, whose lines move with
    their block; continuation lines scale like block lines.
    """
    if indent == " " * source_width:
        return code
    lines = code.splitlines(keepends=True)
    frozen = _lines_inside_strings(code) - _docstring_lines(code)
    out: list[str] = []
    for number, line in enumerate(lines, start=1):
        if number in frozen:
            out.append(line)
            continue
        stripped = line.lstrip(" ")
        if not stripped.strip():
            out.append(stripped)
            continue
        spaces = len(line) - len(stripped)
        levels, rest = divmod(spaces, source_width)
        out.append(indent * levels + " " * rest + stripped)
    return "".join(out)


def _lines_inside_strings(code: str) -> set[int]:
    """Line numbers (1-based) that continue a multi-line string token."""
    frozen: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.STRING and tok.end[0] > tok.start[0]:
                frozen.update(range(tok.start[0] + 1, tok.end[0] + 1))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return frozen
    return frozen


def _docstring_lines(code: str) -> set[int]:
    """Continuation lines (1-based) of module, class and function docstrings."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    lines: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list) or not body:
            continue
        first = body[0]
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
            and first.end_lineno is not None
        ):
            lines.update(range(first.lineno + 1, first.end_lineno + 1))
    return lines


def long_lines(code: str, line_length: int) -> list[int]:
    """1-based numbers of lines longer than `line_length`."""
    return [i for i, line in enumerate(code.splitlines(), 1) if len(line) > line_length]
