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
"""
from __future__ import annotations

import os
import time

from ..errors import DpnbError

DEFAULT_TIMEOUT = 600.0
# While polling, give the core away this often, as MPICH's own waits do: a rank
# sharing the core (more ranks than cores) needs it to progress.  Not more often:
# where another process is runnable, each yield may cost it a time slice.
_YIELD_EVERY = 200e-6
_POLL_SECONDS = 0.5     # poll this long, then sleep between polls
_FIRST_SLEEP = 50e-6
_MAX_SLEEP = 5e-3       # the longest sleep between polls


class CommunicatorError(DpnbError):
    """A collective failed; the communicator is left broken."""


class CommunicatorTimeout(CommunicatorError):
    """A collective did not finish within the communicator's timeout."""


class CommunicatorInterrupted(CommunicatorError, KeyboardInterrupt):
    """Ctrl-C or ipyparallel's interrupt arrived while a collective was waiting.

    It is also a ``KeyboardInterrupt``, so code that stops on Ctrl-C still does."""


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


def wait_all(requests: list, timeout: float, what) -> None:
    """Wait until every MPI request is complete; see ``wait_until``."""
    from mpi4py import MPI

    wait_until(lambda: MPI.Request.Testall(requests), timeout, what)


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
