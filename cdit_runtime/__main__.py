"""``python -m cdit_runtime verify REQUEST.json [flags]`` and ``python -m cdit_runtime schema``."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
