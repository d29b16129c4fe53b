"""The parent's side of a multi-process test: start a command on n MPI ranks (under
``dpnb.communicators.find_mpiexec()``) in a session of its own, stop it and every
process it started at its timeout, and read each rank's report."""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..communicators import find_mpiexec
from ..errors import DpnbError

GRACE_SECONDS = 5.0  # between SIGTERM and SIGKILL when a run is stopped
PR_SET_PDEATHSIG = 1  # Linux's prctl option: a signal for the process when its parent dies
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def mpi_command(n: int, command: Sequence[str]) -> list[str]:
    """``command`` on ``n`` ranks under mpiexec; ``n=0``: ``command`` alone, one plain process."""
    if not isinstance(n, int) or n < 0:
        raise DpnbError(f"n must be a number of ranks, or 0 for one plain process; got {n!r}")
    return [find_mpiexec(), "-n", str(n), *map(str, command)] if n else list(map(str, command))


@dataclasses.dataclass(frozen=True)
class RanksRun:
    """How a run ended: its exit status (None where it was stopped at its timeout) and
    its output (stdout and stderr together; empty where it was not captured)."""

    command: list[str]
    ranks: int
    returncode: int | None
    output: str
    timeout: float
    seconds: float
    stopped: int = 0  # processes the command had started, stopped at the timeout

    @property
    def timed_out(self) -> bool:
        """Whether the run was stopped at its timeout."""
        return self.returncode is None

    @property
    def ending(self) -> str:
        """How the run ended, in words."""
        if self.timed_out:
            return (f"timed out after {self.timeout:g} s: stopped {Path(self.command[0]).name} "
                    f"and the {self.stopped} processes it started (SIGTERM, then SIGKILL)")
        return f"exited with status {self.returncode} after {self.seconds:.1f} s"

    def failures(self) -> dict[int, list[str]]:
        """Each rank's failed checks (its ``RANK r FAIL: ...`` lines), by rank."""
        found: dict[int, list[str]] = {}
        for rank, what in re.findall(r"^RANK (\d+) FAIL: (.*)$", self.output, re.M):
            found.setdefault(int(rank), []).append(what)
        return found

    def passed(self) -> list[int]:
        """The ranks that reported ``RANK r OK``."""
        return sorted({int(r) for r in re.findall(r"^RANK (\d+) OK\b", self.output, re.M)})

    def explain(self) -> str:
        """The ending and every rank's failures, one line each: an assertion's message."""
        lines = [self.ending]
        lines += [f"rank {rank}: " + "; ".join(whats)
                  for rank, whats in sorted(self.failures().items())]
        return "\n".join(lines)


class Ranks:
    """A command started on ``n`` ranks (0: one plain process) in a session of its own;
    :meth:`wait` stops it, with everything it started, once ``timeout`` seconds passed."""

    def __init__(self, n: int, command: Sequence[str], timeout: float = 60.0,
                 env: dict[str, str] | None = None, capture: bool = True):
        self.n, self.timeout = n, timeout
        self.command = mpi_command(n, command)
        child_env = dict(os.environ)
        # a rank left waiting fails with the communicator's own error before the run is stopped
        child_env.setdefault("DPNB_COMM_TIMEOUT", f"{max(1.0, timeout / 2):g}")
        child_env.update(env or {})
        pipe = subprocess.PIPE if capture else None
        self.started = time.monotonic()
        self.process = subprocess.Popen(self.command, env=child_env, stdout=pipe,
                                        stderr=subprocess.STDOUT if capture else None,
                                        text=True, start_new_session=True,
                                        preexec_fn=_terminate_with_parent())

    def wait(self) -> RanksRun:
        """Wait for the run, stopping it at its timeout; how it ended."""
        left = self.timeout - (time.monotonic() - self.started)
        try:
            output, _ = self.process.communicate(timeout=max(left, 0.0))
            returncode, stopped = self.process.returncode, 0
        except subprocess.TimeoutExpired:
            returncode, stopped = None, self.stop()
            output, _ = self.process.communicate()
        return RanksRun(self.command, self.n, returncode, output or "", self.timeout,
                        time.monotonic() - self.started, stopped)

    def stop(self) -> int:
        """Stop the command and every process it started (mpiexec starts its ranks in
        sessions of their own, out of reach of its group): SIGTERM, then SIGKILL to
        those left after a grace period; how many it had started."""
        import psutil

        try:
            root = psutil.Process(self.process.pid)
            tree = [root] + root.children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        count = max(len(tree) - 1, 0)
        for signum in (signal.SIGTERM, signal.SIGKILL):
            for p in tree:
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.send_signal(signum)
            with contextlib.suppress(ProcessLookupError):  # what left the tree, in the session
                os.killpg(self.process.pid, signum)
            _, tree = psutil.wait_procs(tree, timeout=GRACE_SECONDS)
            if not tree:
                break
        self.process.wait()
        return count

    def __enter__(self) -> Ranks:
        return self

    def __exit__(self, *exc) -> None:
        if self.process.poll() is None:
            self.stop()
            self.process.communicate()


def _terminate_with_parent():
    """Where Linux's prctl exists, what the child runs before exec so that it gets SIGTERM
    when the thread that started it ends: mpiexec then ends its ranks, also when the
    parent is killed from outside (a ``timeout``, a CI's cancel) and cannot stop them."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def run_ranks(n: int, command: Sequence[str], timeout: float = 60.0,
              env: dict[str, str] | None = None, capture: bool = True) -> RanksRun:
    """Run ``command`` on ``n`` ranks (0: one plain process), stopped at ``timeout``."""
    with Ranks(n, command, timeout, env, capture) as ranks:
        return ranks.wait()


def run_script(n: int, script: str | os.PathLike, *args: str, timeout: float = 60.0,
               env: dict[str, str] | None = None) -> RanksRun:
    """Run the Python file ``script`` on ``n`` ranks, one BLAS thread each (``ONE_THREAD``)."""
    return run_ranks(n, [sys.executable, str(script), *args], timeout,
                     {**ONE_THREAD, **(env or {})})


def assert_ranks_ok(run: RanksRun, ranks: Iterable[int] | None = None,
                    exit_status: bool = True) -> None:
    """Every rank of ``ranks`` (default: all) reported OK, none reported a failure, and
    the run ended in time (with status 0 unless ``exit_status`` is False)."""
    expected = list(range(max(run.ranks, 1)) if ranks is None else ranks)
    missing = sorted(set(expected) - set(run.passed()))
    bad_end = run.timed_out or (exit_status and run.returncode != 0)
    if missing or bad_end or run.failures():
        missed = [f"ranks {missing} did not report OK"] if missing else []
        raise AssertionError("\n".join(missed + [run.explain(), run.output]))


def check_ranks(n: int, script: str | os.PathLike, *args: str, timeout: float = 60.0,
                env: dict[str, str] | None = None) -> RanksRun:
    """Run ``script`` on ``n`` ranks (``run_script``) and require every rank's OK."""
    run = run_script(n, script, *args, timeout=timeout, env=env)
    assert_ranks_ok(run)
    return run
