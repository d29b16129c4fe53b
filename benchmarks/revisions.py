"""Revisions of this repository checked out beside it, for the benchmarks that measure
this checkout against an earlier revision in the same run (code_paths, against_revision)."""
from __future__ import annotations

import contextlib
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BEFORE_ISSUE_25 = "cac59f8"   # the code before issue 25's moves: the default reference


@contextlib.contextmanager
def checked_out(revision: str) -> Iterator[Path]:
    """``revision`` in a temporary ``git worktree``, removed afterwards."""
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch) / "tree"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(tree),
                        revision], check=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                           check=False)


def short(revision: str = "HEAD") -> str:
    """The abbreviated commit of ``revision``."""
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", revision],
                          capture_output=True, text=True, check=True).stdout.strip()
