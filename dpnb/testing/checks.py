"""The side of a multi-process test that runs on each rank: deterministic per-rank
data, checks that record failures instead of stopping, and the report
(``RANK r OK n checks`` / ``RANK r FAIL: ...`` lines, an exit status) that
:func:`dpnb.testing.assert_ranks_ok` reads."""
from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterator

import numpy as np

from ..context import to_module

# The absolute (and relative) tolerance of Checks.close by dtype kind and item size.
DEFAULT_TOLERANCE = {("f", 2): 2e-3, ("f", 4): 1e-5, ("f", 8): 1e-12,
                     ("c", 8): 1e-5, ("c", 16): 1e-12}


def rank_data(rank: int, case: int, shape, dtype=np.float32) -> np.ndarray:
    """The array rank ``rank`` contributes to case ``case``; any rank can rebuild any rank's."""
    rng = np.random.RandomState(1000 * case + rank)
    if np.dtype(dtype).kind in "iu":
        return rng.randint(-50 if np.dtype(dtype).kind == "i" else 0, 50,
                           size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def this_rank() -> int:
    """This process's rank in MPI_COMM_WORLD: mpi4py's where MPI is running, else the
    launcher's (``PMI_RANK``, ``OMPI_COMM_WORLD_RANK``), 0 outside MPI."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        return mpi.COMM_WORLD.Get_rank()
    for name in ("PMI_RANK", "OMPI_COMM_WORLD_RANK"):
        if name in os.environ:
            return int(os.environ[name])
    return 0


def say(line: str) -> None:
    """Print ``line`` in one write, so that mpiexec never splices another rank's output into it."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Checks:
    """The checks of one rank, each kept as ``{"check", "ok", "detail"}`` in ``items``;
    a failure is printed at once (``RANK r FAIL: check: detail``) and the run goes on."""

    def __init__(self, rank: int | None = None):
        self.rank = this_rank() if rank is None else rank
        self.items: list[dict] = []
        self.worst = 0.0  # the largest error close() measured (relative where asked)

    @property
    def failed(self) -> list[dict]:
        """The checks that failed, in order."""
        return [c for c in self.items if not c["ok"]]

    def true(self, condition, what: str, detail: str = "") -> bool:
        """Record the check ``what``: passed where ``condition`` is true."""
        ok = bool(condition)
        self.items.append({"check": what, "ok": ok, "detail": detail})
        if not ok:
            say(f"RANK {self.rank} FAIL: {what}{': ' + detail if detail else ''}")
        return ok

    def close(self, got, expected, what: str, tol: float | None = None,
              relative: bool = False) -> bool:
        """``got`` (NumPy or CuPy) has ``expected``'s dtype and shape and is within ``tol``
        of it: absolute and relative elementwise (as ``np.allclose``), or with ``relative``
        the largest error over the largest finite ``|expected|``.  ``tol`` defaults by dtype
        (0 for integers); equal infinities, and NaN where NaN is expected, are equal."""
        got, expected = np.asarray(to_module(got, np)), np.asarray(expected)
        if got.shape != expected.shape or got.dtype != expected.dtype:
            return self.true(False, what, f"got {got.dtype}{list(got.shape)}, expected "
                                          f"{expected.dtype}{list(expected.shape)}")
        if tol is None:
            tol = DEFAULT_TOLERANCE.get((got.dtype.kind, got.dtype.itemsize), 0.0)
        if expected.size == 0:
            return self.true(True, what)
        got64, expected64 = got.astype(np.float64), expected.astype(np.float64)
        alike = (got64 == expected64) | (np.isnan(got64) & np.isnan(expected64))
        with np.errstate(invalid="ignore"):  # inf - inf where ``alike`` already decided
            error = np.where(alike, 0.0, np.abs(got64 - expected64))
        if relative:
            finite = np.abs(expected64[np.isfinite(expected64)])
            scale = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
            worst = float(error.max()) / scale
            ok = worst <= tol
            detail = f"max |got - expected| / max |expected| = {worst:.3g} (tolerance {tol:g})"
        else:
            worst = float(error.max())
            scale = np.where(np.isfinite(expected64), np.abs(expected64), 0.0)
            ok = bool(np.all(error <= tol + tol * scale))
            detail = f"max |got - expected| = {worst:.3g} (tolerance {tol:g})"
        self.worst = max(self.worst, worst) if np.isfinite(worst) else float("inf")
        return self.true(ok, what, detail)

    def raises(self, exception: type[BaseException] | tuple, pattern: str,
               fn: Callable[[], object], what: str) -> BaseException | None:
        """``fn()`` raises ``exception`` with a message that ``pattern`` matches; the error."""
        try:
            fn()
        except exception as e:
            self.true(re.search(pattern, str(e), re.S), what,
                      f"message {str(e)!r} does not match {pattern!r}")
            return e
        except BaseException as e:  # noqa: BLE001 - reported as a failed check
            self.true(False, what, f"raised {type(e).__name__}: {e}")
            return None
        self.true(False, what, "did not raise")
        return None

    @contextlib.contextmanager
    def guard(self, what: str) -> Iterator[None]:
        """An exception inside the block is a failed check ``what`` (traceback printed); go on."""
        try:
            yield
        except Exception as e:  # noqa: BLE001 - a failure is a result here
            traceback.print_exc()
            sys.stderr.flush()
            self.true(False, what, f"raised {type(e).__name__}: {e}")

    def report(self) -> bool:
        """Print ``RANK r OK n checks`` where every check passed; whether they did."""
        if not self.failed:
            say(f"RANK {self.rank} OK {len(self.items)} checks")
        return not self.failed

    def finish(self, hard_exit: bool = False, sync: Callable[[], object] | None = None) -> None:
        """Report, call ``sync()`` and exit (status 1 on failures).  ``hard_exit`` skips
        MPI_Finalize, for a rank that left a collective pending on purpose."""
        status = 0 if self.report() else 1
        if sync is not None:
            sync()
        if hard_exit:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
        sys.exit(status)


def guarded(main: Callable[[], object]) -> None:
    """Run ``main()``; an exception it lets out is this rank's failure: printed as
    ``RANK r FAIL: raised ...`` with its traceback, then exit status 2 at once."""
    try:
        main()
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        traceback.print_exc()
        say(f"RANK {this_rank()} FAIL: raised {type(e).__name__}: {e}")
        sys.stderr.flush()
        os._exit(2)


class LoggedWarnings(logging.Handler):
    """The warnings logged on ``logger`` (and below it) from now on, as ``messages``:
    what a rank told its user, for a check to read."""

    def __init__(self, logger: str):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        logging.getLogger(logger).addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
