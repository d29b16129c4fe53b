"""What a command run in the tests wrote into this checkout, as git sees it."""
from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def repository_status() -> str:
    """Every changed, new or ignored path but bytecode caches: those are Python's and Numba's
    writes (Numba caches its compiled loops beside dpnb's modules), not the command's."""
    status = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--ignored"],
                            capture_output=True, text=True, check=True).stdout
    return "\n".join(line for line in status.splitlines() if "__pycache__" not in line)
