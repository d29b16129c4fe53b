"""Small values between ranks as JSON text in byte buffers, never pickles.

MPI is unauthenticated, and unpickling what arrives over it would run whatever a
process that joins the job sends: mpi4py's lowercase methods (``allgather``,
``bcast``...) pickle, so dpnb uses none of them.  What travels here is JSON
(ints, floats, strings, lists, dicts with string keys; tuples arrive as lists),
through the buffer-based collectives, two per call: the sizes, then the bytes.

``wait(request)`` waits for each request; by default ``Request.Wait``, the
communicator's bounded, interruptible wait where a collective may be abandoned."""
from __future__ import annotations

import json

import numpy as np


def _wait(request) -> None:
    request.Wait()


def _encoded(value) -> np.ndarray:
    return np.frombuffer(json.dumps(value).encode(), np.uint8)


def _decoded(data: np.ndarray):
    return json.loads(data.tobytes())


def allgather_json(comm, value, wait=_wait) -> list:
    """``value`` (a JSON value) of every rank of ``comm`` (mpi4py), in rank order."""
    from mpi4py import MPI

    data = _encoded(value)
    sizes = np.empty(comm.Get_size(), np.int64)
    wait(comm.Iallgather(np.array([data.size], np.int64), sizes))
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    received = np.empty(int(sizes.sum()), np.uint8)
    wait(comm.Iallgatherv(data, [received, sizes.tolist(), offsets.tolist(), MPI.BYTE]))
    return [_decoded(received[o:o + n]) for o, n in zip(offsets, sizes)]


def bcast_json(comm, value, root: int = 0, wait=_wait):
    """Rank ``root``'s ``value`` (a JSON value; ignored on the other ranks) on every rank."""
    data = _encoded(value) if comm.Get_rank() == root else None
    size = np.array([0 if data is None else data.size], np.int64)
    wait(comm.Ibcast(size, root=root))
    if data is None:
        data = np.empty(int(size[0]), np.uint8)
    wait(comm.Ibcast(data, root=root))
    return _decoded(data)
