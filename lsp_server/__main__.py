"""`python -m lsp_server`: the cdit language server on stdio (`--tcp` / `--ws`: see `--help`)."""

# Nothing may be imported before the working directory leaves `sys.path` (not even `__future__`):
# `python -m` puts it first, so a `pygls.py` (or `pathlib.py`) there would shadow the real module.
# `sys` and `os` are loaded by the interpreter's start-up already.
import os
import sys


def _drop_working_directory() -> None:
    """Remove the working directory `python -m` put first on `sys.path`, unless this package
    itself was found there (a source checkout run in place) or safe-path mode kept it out."""
    if not sys.path or getattr(sys.flags, "safe_path", False):
        return
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:  # the working directory was deleted
        return
    first = sys.path[0]
    if first != "" and os.path.realpath(first) != cwd:
        return
    package_parent = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    if package_parent != cwd:
        del sys.path[0]


_drop_working_directory()

from lsp_server.server import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
