"""Transport-neutral plans: which memory a collective works on, in which chunks.

The arrays of one exchange are first described as ``Piece``s: where each
item's elements lie now (a 1-D view) and, for a view into flat parameter
storage, which buffer and offset, so that neighbours can be fused.  A ``Plan``
turns the pieces into chunks:

- ``Direct``: a contiguous stretch reduced where it lies, with no copy.
  Pieces that sit side by side in flat storage form one stretch, whatever
  order they were given in, and so does any large array.  Long stretches are
  cut into cache-sized segments, which MPI moves two to three times as fast as
  one huge buffer on shared memory (benchmarks/allreduce.py).
- ``Packed``: small arrays gathered into a staging buffer (a bucket) and
  written back afterwards.

Both MPI and NCCL transports run these chunks; nothing here talks to either."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ..storage import Run, locate
from .agreement import Call, stable_hash

DEFAULT_SEGMENT_BYTES = 2 << 20  # about one L2 cache; see benchmarks/allreduce.py
# Where the ranks span hosts a long stretch goes in few large collectives: over a
# network one after the other they cost a handshake each, and cache-sized ones ran
# at 0.85x the throughput of one message, 64 MB ones at 0.96-0.99x (benchmarks/hosts.py)
HOSTS_SEGMENT_BYTES = 64 << 20
DEFAULT_BUCKET_BYTES = 2 << 20
STAGING_RING = 2  # staging buffers per dtype: one in flight, one being packed
DIRECT_MIN_BYTES = 64 << 10  # smaller stretches are cheaper to pack together than to send alone
# dtypes the communicator moves, and the dtype they are staged and reduced in
STAGE_DTYPES = {np.dtype(t): np.dtype(s) for t, s in
                [("float16", "float32"), ("float32", "float32"), ("float64", "float64"),
                 ("int32", "int32"), ("int64", "int64")]}


def address(array) -> int:
    """Where a NumPy or CuPy array's first element lies."""
    if isinstance(array, np.ndarray):
        return array.__array_interface__["data"][0]
    return array.data.ptr


@dataclasses.dataclass(eq=False)
class Piece:
    """One item of an exchange: its elements (a 1-D view where they lie), its
    position in the caller's list, the NdArray handle it came from (None for a
    plain array) and, inside flat storage, the buffer it lies in and where."""

    view: object
    index: int
    shape: tuple
    handle: object = None
    buffer: tuple | None = None  # (id(storage), "data" | "grad"): pieces here may fuse
    flat: object = None          # that whole flat buffer
    start: int = 0


@dataclasses.dataclass(eq=False)
class Direct:
    """A contiguous 1-D view, reduced in place (NumPy; CuPy on the NCCL path)."""

    view: object


@dataclasses.dataclass(eq=False)
class Packed:
    """Pieces of arrays laid one after another in a staging buffer of ``dtype``."""

    dtype: np.dtype
    capacity: int  # elements of a full bucket: the staging buffer's size
    entries: list = dataclasses.field(default_factory=list)  # (flat view, offset, count)
    size: int = 0
    host_only: bool = True  # every piece is a NumPy array (else CuPy, staged through the host)
    transport: dict = dataclasses.field(default_factory=dict, repr=False)  # a transport's cache


def pieces_of_runs(runs: Sequence[Run]) -> list[Piece]:
    """The gradients of a solver's runs, in run order: a run of flat storage is one
    stretch by construction, so nothing needs to be rediscovered."""
    pieces: list[Piece] = []
    for run in runs:
        if run.storage is None:
            v = run.variables[0]
            pieces.append(Piece(run.grad(), len(pieces), v.shape, v.grad))
            continue
        flat, key = run.storage.grad, (id(run.storage), "grad")
        for v, offset in zip(run.variables, run.offsets):
            start = run.start + offset
            pieces.append(Piece(flat[start:start + v.size], len(pieces), v.shape, v.grad, key, flat,
                                start))
    return pieces


def pieces_of_list(arrays: list, handles: list) -> list[Piece]:
    """The items of a caller's list (their arrays and NdArray handles, None for
    plain arrays), those in flat storage sorted into storage order so that
    neighbours fuse whatever order the list is in; the others follow in list order."""
    stored, loose = [], []
    for i, (array, handle) in enumerate(zip(arrays, handles)):
        found = locate(handle) if handle is not None else None
        kind = found[0].kind_of(handle) if found is not None else None
        if kind is None:
            loose.append(Piece(array.reshape(-1), i, tuple(array.shape), handle))
            continue
        storage, offset = found
        flat = getattr(storage, kind)
        stored.append(Piece(flat[offset:offset + array.size], i, tuple(array.shape), handle,
                            (id(storage), kind),
                            flat, offset))
    stored.sort(key=lambda p: (p.buffer, p.start))
    return stored + loose


class Plan:
    """The chunks of one exchange and its agreement-check descriptions."""

    def __init__(self, pieces: list[Piece], segment_bytes: int, bucket_bytes: int,
                 device: bool = False, direct_gpu: bool = False):
        self.pieces = pieces
        self.device = device          # all CuPy arrays, for NCCL: one call per stretch
        self.direct_gpu = direct_gpu  # CUDA-aware MPI: CuPy stretches go to MPI where they lie
        self.bucket_bytes = bucket_bytes
        in_order = sorted(pieces, key=lambda p: p.index)
        self.items = [p.view for p in in_order]
        self.specs = [(p.view.dtype.str, p.shape) for p in in_order]
        self.all_float = all(p.view.dtype.kind == "f" for p in pieces)
        self.chunks = self._layout_chunks(segment_bytes)
        self.layout = stable_hash([(type(c).__name__, chunk_dtype(c).str, chunk_size(c))
                                   for c in self.chunks])
        self.specs_hash = stable_hash(self.specs)
        self.nbytes = sum(p.view.nbytes for p in pieces)
        self._canonical = None
        self._calls: dict = {}
        self.transport: dict = {}  # a transport's cache for this plan

    def call(self, operation: str, group: str, root: int, division: bool) -> Call:
        """The agreement-check description of ``operation`` on these arrays (made once)."""
        key = (operation, group, root, division)
        call = self._calls.get(key)
        if call is None:
            call = self._calls[key] = Call(operation, group, self.specs, root, division,
                                           self.bucket_bytes, self.layout, self.specs_hash)
        return call

    def canonical(self) -> list:
        """A schedule that depends only on dtypes and shapes (every item packed, in
        list order), for ranks whose memory layouts differ."""
        if self._canonical is None and self.device:
            self._canonical = [Direct(a) for a in self.items]
        if self._canonical is None:
            chunks: list = []
            open_buckets: dict = {}
            for a in self.items:
                _pack(chunks, open_buckets, a, self.bucket_bytes)
            self._canonical = chunks + list(open_buckets.values())
        return self._canonical

    def _stretches(self) -> list[tuple]:
        """(buffer key or None, 1-D view) for each run of adjacent pieces."""
        runs: list[list] = []  # [piece starting it, stop]
        for p in self.pieces:
            last = runs[-1] if runs else None
            if (p.buffer is not None and last is not None and last[0].buffer == p.buffer
                    and last[1] == p.start):
                last[1] += p.view.size
            else:
                runs.append([p, p.start + p.view.size])
        return [(p.buffer, p.view if p.buffer is None else p.flat[p.start:stop])
                for p, stop in runs]

    def _layout_chunks(self, segment_bytes: int) -> list:
        views = self._stretches()
        if self.device:  # NCCL fuses the calls of a group itself
            return [Direct(view) for _, view in views]
        chunks: list = []
        open_buckets: dict = {}
        for key, view in views:
            if ((isinstance(view, np.ndarray) or self.direct_gpu)
                    and STAGE_DTYPES[view.dtype] == view.dtype
                    and (key is not None or view.nbytes >= DIRECT_MIN_BYTES)):
                step = max(1, segment_bytes // view.itemsize)
                chunks.extend(Direct(view[i:i + step]) for i in range(0, view.size, step))
            else:
                _pack(chunks, open_buckets, view, self.bucket_bytes)
        return chunks + list(open_buckets.values())


def _pack(chunks: list, open_buckets: dict, flat, bucket_bytes: int) -> None:
    """Lay ``flat`` into the open bucket of its staging dtype, closing full buckets."""
    dtype = STAGE_DTYPES[flat.dtype]
    capacity = max(1, bucket_bytes // dtype.itemsize)
    position = 0
    while position < flat.size:
        bucket = open_buckets.get(dtype)
        if bucket is None:
            bucket = open_buckets[dtype] = Packed(dtype, capacity)
        take = min(flat.size - position, capacity - bucket.size)
        bucket.entries.append((flat[position:position + take], bucket.size, take))
        bucket.host_only &= isinstance(flat, np.ndarray)
        bucket.size += take
        position += take
        if bucket.size == capacity:
            chunks.append(open_buckets.pop(dtype))


def chunk_dtype(chunk) -> np.dtype:
    """The dtype a chunk travels in: its view's for a direct chunk, else its bucket's."""
    return chunk.view.dtype if isinstance(chunk, Direct) else chunk.dtype


def chunk_size(chunk) -> int:
    """The number of elements a chunk sends."""
    return chunk.view.size if isinstance(chunk, Direct) else chunk.size


class Stager:
    """Staging buffers: per dtype, a ring of ``STAGING_RING`` buckets, reused
    across calls, so staging memory stays bounded by the bucket size."""

    def __init__(self):
        self._rings: dict = {}

    def next(self, dtype: np.dtype, elements: int) -> np.ndarray:
        ring = self._rings.get(dtype)
        if ring is None or ring[0][0].size != elements:
            buffers = [np.empty(elements, dtype) for _ in range(STAGING_RING)]
            ring = self._rings[dtype] = [buffers, 0]
        buffers, turn = ring
        ring[1] = (turn + 1) % STAGING_RING
        return buffers[turn]

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for buffers, _ in self._rings.values() for b in buffers)
