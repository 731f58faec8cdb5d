"""`python -m lsp_server`: the cdit language server on stdio."""

from __future__ import annotations

import sys

from .server import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
