"""Waiting for non-blocking collectives (MPI requests, CUDA events of NCCL
calls) without giving up control.

A blocking MPI call cannot be interrupted: Ctrl-C (or ipyparallel's
interrupt, which sends SIGINT) would wait for the other ranks forever.  Here
requests are polled with ``Testall``, which also drives MPI's progress: a rank
that sleeps stalls the collective for everyone, so the poll spins, yielding
the core now and then (as MPICH's own waits do) so that a rank sharing it can
progress, and only once the other ranks are clearly absent does it sleep, a
few milliseconds at most.  Python handles signals between polls, so SIGINT
raises at once, and a deadline is checked.

``Guard`` is the one place that waits for a communicator: a failure there (or
anything raised while data collectives are under way) leaves the ranks out of
step, so it marks the communicator broken and keeps the abandoned requests.
"""
from __future__ import annotations

import os
import time

from ..errors import CommunicatorError, CommunicatorInterrupted, CommunicatorTimeout, DpnbError

DEFAULT_TIMEOUT = 600.0
# While polling, give the core away this often, as MPICH's own waits do: a rank
# sharing the core (more ranks than cores) needs it to progress.  Not more often:
# where another process is runnable, each yield may cost it a time slice.
_YIELD_EVERY = 200e-6
_POLL_SECONDS = 0.5     # poll this long, then sleep between polls
_FIRST_SLEEP = 50e-6
_MAX_SLEEP = 5e-3       # the longest sleep between polls
_QUICK_TESTS = 64       # tests (about 15 us) before a short wait takes the polling loop


def timeout_from_env() -> float:
    """The timeout in seconds from ``DPNB_COMM_TIMEOUT``, else 600."""
    raw = os.environ.get("DPNB_COMM_TIMEOUT")
    if raw is None:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise DpnbError(f"DPNB_COMM_TIMEOUT must be a positive number of seconds, got {raw!r}")
    return value


def wait_until(done, timeout: float, what) -> None:
    """Poll ``done()`` until it is true.

    ``what()`` names the operation for the error; it is only called on failure.
    Raises ``CommunicatorTimeout`` after ``timeout`` seconds and
    ``CommunicatorInterrupted`` on SIGINT; the operation is then still pending."""
    if done():
        return
    start = last_yield = time.monotonic()
    deadline = start + timeout
    delay = _FIRST_SLEEP
    try:
        while not done():
            now = time.monotonic()
            if now > deadline:
                raise CommunicatorTimeout(
                    f"{what()}: the other ranks did not take part within the timeout of "
                    f"{timeout:g} s (a rank may have stopped, raised an error, or called a "
                    "different collective or group); raise `comm.timeout` or "
                    "DPNB_COMM_TIMEOUT if the ranks are only slow")
            if now - start > _POLL_SECONDS:
                time.sleep(delay)
                delay = min(2 * delay, _MAX_SLEEP)
            elif now - last_yield > _YIELD_EVERY:
                os.sched_yield()
                last_yield = now
    except KeyboardInterrupt as e:
        if isinstance(e, CommunicatorInterrupted):
            raise
        raise CommunicatorInterrupted(
            f"{what()}: interrupted while waiting for the other ranks") from e


class Guard:
    """Waits for one communicator's collectives, with its timeout, and remembers
    that it is broken once a wait (or a step of a pipeline) has failed."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.broken: str | None = None
        self._abandoned: list = []  # requests a failure left pending (MPI may still use them)

    @property
    def timeout(self) -> float:
        """Seconds a collective may wait for the other ranks before failing."""
        return self._timeout

    @timeout.setter
    def timeout(self, seconds: float) -> None:
        if not float(seconds) > 0:
            raise DpnbError(f"comm.timeout must be a positive number of seconds, got {seconds!r}")
        self._timeout = float(seconds)

    def check_usable(self) -> None:
        """Raise if an earlier collective failed."""
        if self.broken is not None:
            raise CommunicatorError(
                f"this communicator is broken: an earlier collective failed ({self.broken}). "
                "Its ranks are out of step and cannot be matched up again: restart the engines "
                "(e.g. `%dpnb restart` or cluster.restart()) and create a new communicator")

    def wait(self, requests: list, what) -> None:
        """Wait for MPI ``requests``; ``what()`` names the operation for errors."""
        from mpi4py import MPI

        self.wait_until(lambda: MPI.Request.Testall(requests), what, requests)

    def wait_short(self, request, what) -> None:
        """Wait for one MPI ``request`` expected to finish within microseconds (a small
        collective): a few tests in a tight loop first, then as ``wait``."""
        try:
            for _ in range(_QUICK_TESTS):
                if request.Test():
                    return
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt) and not isinstance(e, CommunicatorInterrupted):
                e = CommunicatorInterrupted(f"{what()}: interrupted while waiting for the "
                                            "other ranks")
            self.mark_broken(e, [request])
            raise e
        self.wait([request], what)

    def wait_until(self, done, what, requests: list = ()) -> None:
        """Wait until ``done()``; a failure marks the communicator broken."""
        try:
            wait_until(done, self.timeout, what)
        except CommunicatorError as e:
            self.mark_broken(e, list(requests))
            raise

    def run(self, step, pending) -> None:
        """Run ``step()`` (a pipeline's pump or drain).  Once data collectives are
        under way any failure, an interrupt while packing too, breaks the
        communicator; ``pending()`` lists the MPI requests then left in flight."""
        try:
            step()
        except BaseException as e:
            self.mark_broken(e, pending())
            raise

    def mark_broken(self, error: BaseException, requests: list) -> None:
        self._abandoned.extend(requests)
        if self.broken is None:
            self.broken = str(error) or type(error).__name__
