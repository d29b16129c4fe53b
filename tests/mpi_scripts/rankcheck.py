"""Shared by the rank scripts: deterministic per-rank data, checks that collect
failures instead of stopping, and an exit status the pytest side asserts."""
from __future__ import annotations

import os
import re
import sys
import traceback

import numpy as np


def rank_data(rank: int, seed: int, shape, dtype) -> np.ndarray:
    """The array rank ``rank`` contributes for case ``seed``; every rank can rebuild any rank's."""
    rng = np.random.RandomState(1000 * seed + rank)
    if np.dtype(dtype).kind == "i":
        return rng.randint(-50, 50, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


class Checks:
    """Records failed checks of one rank; ``finish`` reports them and sets the exit status."""

    def __init__(self, rank: int):
        self.rank = rank
        self.count = 0
        self.failures: list[str] = []

    def true(self, condition: bool, what: str) -> None:
        self.count += 1
        if not condition:
            self.failures.append(what)

    def close(self, got, expected, what: str) -> None:
        got, expected = np.asarray(got), np.asarray(expected)
        tol = {"f": 1e-5 if got.dtype.itemsize <= 4 else 1e-12}.get(got.dtype.kind, 0)
        if got.dtype.itemsize == 2:
            tol = 2e-3
        self.count += 1
        if got.shape != expected.shape or got.dtype != expected.dtype:
            self.failures.append(f"{what}: got {got.dtype}{got.shape}, expected "
                                 f"{expected.dtype}{expected.shape}")
        elif not np.allclose(got, expected, rtol=tol, atol=tol):
            err = np.max(np.abs(got.astype(np.float64) - expected))
            self.failures.append(f"{what}: max |error| {err:.3g}")

    def raises(self, exception, pattern: str, fn, what: str):
        """Check that ``fn()`` raises ``exception`` with a message matching ``pattern``."""
        self.count += 1
        try:
            fn()
        except exception as e:
            if not re.search(pattern, str(e), re.S):
                self.failures.append(f"{what}: message {str(e)!r} does not match {pattern!r}")
            return e
        except BaseException as e:  # noqa: BLE001 - reported as a failed check
            self.failures.append(f"{what}: raised {type(e).__name__}: {e}")
            return None
        self.failures.append(f"{what}: did not raise")
        return None

    def finish(self, hard_exit: bool = False, sync=None) -> None:
        """Print the outcome; exit non-zero on failures.  ``hard_exit`` skips
        MPI_Finalize (needed when a collective was left pending on purpose);
        ``sync()`` is called after printing, before exiting."""
        for f in self.failures:
            print(f"RANK {self.rank} FAIL: {f}", flush=True)
        if not self.failures:
            print(f"RANK {self.rank} OK {self.count} checks", flush=True)
        if sync is not None:
            sync()
        status = 1 if self.failures else 0
        if hard_exit:
            os._exit(status)
        sys.exit(status)


def guarded(main) -> None:
    """Run ``main()``; an unexpected exception prints its traceback and exits 2."""
    try:
        main()
    except SystemExit:
        raise
    except BaseException:  # noqa: BLE001 - reported to the pytest side
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(2)
