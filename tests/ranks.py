"""One harness for multi-process tests: start a script of tests/mpi_scripts on n
MPI ranks, and check every rank's own report ("RANK r OK" / "RANK r FAIL: ...")."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import dpnb.communicators as C

SCRIPTS = Path(__file__).parent / "mpi_scripts"


def run_ranks(n: int, script: str, *args: str, timeout: float = 60,
              exit_status: bool = True) -> str:
    """Run ``script`` on ``n`` MPI ranks; returns the output, failing on a non-zero exit
    (with every rank's failures) unless ``exit_status`` is False."""
    env = dict(os.environ, DPNB_COMM_TIMEOUT="30", OMP_NUM_THREADS="1")
    result = subprocess.run([C.find_mpiexec(), "-n", str(n), sys.executable,
                             str(SCRIPTS / script), *args],
                            capture_output=True, text=True, timeout=timeout, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0 or not exit_status, \
        f"mpiexec exited with {result.returncode}:\n{rank_failures(output)}\n{output}"
    return output


def rank_failures(output: str) -> str:
    """The failed checks, grouped by rank, for an assertion message."""
    failures: dict[str, list[str]] = {}
    for rank, what in re.findall(r"^RANK (\d+) FAIL: (.*)$", output, re.M):
        failures.setdefault(rank, []).append(what)
    return "\n".join(f"rank {rank}: " + "; ".join(whats) for rank, whats in failures.items())


def assert_ranks_ok(output: str, ranks) -> None:
    """Every rank of ``ranks`` reported OK, and none reported a failure."""
    missing = [r for r in ranks if f"RANK {r} OK" not in output]
    assert not missing and "FAIL" not in output, \
        f"ranks {missing} did not report OK:\n{rank_failures(output)}\n{output}"


def check_ranks(n: int, script: str, *args: str, timeout: float = 60) -> None:
    """Run ``script`` on ``n`` ranks and require every rank's OK."""
    assert_ranks_ok(run_ranks(n, script, *args, timeout=timeout), range(n))
