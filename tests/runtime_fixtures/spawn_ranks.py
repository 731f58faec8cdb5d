"""A stand-in controller for the spawn tests: ``python spawn_ranks.py WORLD LOG_DIR COMMAND...``.

Prints ``spawning`` and then starts WORLD ranks running COMMAND through the runtime's launcher
(each under its guard), then waits. The test SIGKILLs this process while the ranks are being
forked and checks that none of them (nor what they started) is left behind.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    from cdit_runtime.launcher import start_launch

    world, log_dir, command = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    sys.stdout.write("spawning\n")
    sys.stdout.flush()
    launch = start_launch("race", log_dir / "spec.json", world, log_dir, dict(os.environ), command)
    sys.stdout.write("spawned\n")
    sys.stdout.flush()
    while launch.alive():
        time.sleep(0.1)


if __name__ == "__main__":
    main()
