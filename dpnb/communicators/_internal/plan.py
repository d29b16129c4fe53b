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

A ``Collective`` says what this rank does in one (sends, receives, divides
by what).  Both MPI and NCCL transports run these chunks and read the
collective; nothing here talks to either.  ``ListSource`` turns a caller's
list of arrays into pieces, after ``resolve`` has checked them."""
from __future__ import annotations

import dataclasses
import hashlib
import operator
from collections.abc import Sequence

import numpy as np

from ...context import array_module_of
from ...errors import DpnbError
from ...graph import Variable
from ...ndarray import NdArray
from ...storage import Run, locate

DATA_OPERATIONS = ("all_reduce", "reduce", "bcast")
DIRECT_MIN_BYTES = 64 << 10  # smaller stretches are cheaper to pack together than to send alone
_DATA = operator.attrgetter("data")
# dtypes the communicator moves, and the dtype they are staged and reduced in
STAGE_DTYPES = {np.dtype(t): np.dtype(s) for t, s in
                [("float16", "float32"), ("float32", "float32"), ("float64", "float64"),
                 ("int32", "int32"), ("int64", "int64")]}


def stable_hash(value) -> int:
    """A non-negative 62-bit hash of ``repr(value)``, the same in every process
    (Python's ``hash`` of strings differs between processes)."""
    digest = hashlib.blake2b(repr(value).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 2


@dataclasses.dataclass(frozen=True)
class Collective:
    """One rank's part in a data collective of a group."""

    operation: str          # "all_reduce", "reduce" or "bcast"
    root: int               # group rank of the root (-1 for all_reduce)
    sends: bool             # this rank's data goes into the result
    receives: bool          # this rank's arrays are overwritten with the result
    divisor: int | None     # what a received result is divided by (division=True)

    @property
    def scales_inputs(self) -> bool:
        """Whether each rank may scale its own data by ``1 / divisor`` before the sum
        instead of the result after it: for all_reduce (every rank sends and receives)
        by a power of two, where both give the same bits (scaling by a power of two
        commutes with rounding, subnormals apart)."""
        d = self.divisor
        return self.operation == "all_reduce" and d is not None and d & (d - 1) == 0

    @classmethod
    def of(cls, operation: str, rank: int, size: int, root: int = -1,
           division: bool = False) -> "Collective":
        """This rank's (group rank ``rank`` of ``size``) part in ``operation``."""
        if operation not in DATA_OPERATIONS:
            raise ValueError(f"not a data collective: {operation!r}")
        sends = operation != "bcast" or rank == root
        receives = (operation == "all_reduce" or (operation == "reduce" and rank == root)
                    or (operation == "bcast" and rank != root))
        return cls(operation, root, sends, receives, size if division and receives else None)


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
        self.setups: dict = {}  # the exchange's set-up of each collective run on this plan


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


class ListSource:
    """The items of a caller's list, and how to tell that they are still where a
    plan found them: flat storage moves when it grows (rebinding every handle into
    it), other handles may be rebound one by one.  With ``widen`` (the
    communicator's float type), float handles of a narrower type are cast to it
    first, as nnabla's collectives cast every array to the communicator's type."""

    def __init__(self, objs: list, operation: str, widen: np.dtype | None):
        self.objs = objs  # held, so that the ids in the cache key stay theirs
        self.widen = widen
        self.arrays, self.handles = resolve(objs, operation)
        self._watched: list = []  # handles whose rebinding means the plan is stale
        self._bound: list = []    # the arrays they were bound to then

    def pieces(self) -> list:
        if self.widen is not None:
            for h in self.handles:
                if h is not None and narrower(h.dtype, self.widen) and not h.pinned:
                    h.cast(self.widen)
        self.arrays = [h.data if h is not None else a for a, h in zip(self.arrays, self.handles)]
        pieces = pieces_of_list(self.arrays, self.handles)
        one_per_buffer = {p.buffer: p.handle for p in pieces if p.buffer is not None}
        self._watched = list(one_per_buffer.values()) + [
            p.handle for p in pieces if p.buffer is None and p.handle is not None]
        self._bound = [h.data for h in self._watched]
        return pieces

    def moved(self) -> bool:
        """Whether any item's memory moved since ``pieces()``."""
        return bool(self._watched) and not all(map(operator.is_, map(_DATA, self._watched),
                                                   self._bound))


def narrower(dtype: np.dtype, than: np.dtype) -> bool:
    """Whether ``dtype`` is a float type with fewer bits than ``than``."""
    return dtype.kind == "f" and dtype.itemsize < than.itemsize


def resolve(objs: list, operation: str) -> tuple[list, list]:
    """The backing arrays of ``objs`` and their NdArray handles (None for plain
    arrays), checked: supported dtype, C-contiguous, writable."""
    arrays, handles = [], []
    for i, obj in enumerate(objs):
        if isinstance(obj, NdArray):
            handle, array = obj, obj.data
        elif isinstance(obj, Variable):
            raise DpnbError(f"{operation}: item {i} is a Variable; pass its gradient or data "
                            "handle (x.grad or x.data)")
        elif isinstance(obj, np.ndarray) or (hasattr(obj, "__cuda_array_interface__")
                                             and array_module_of(obj) is not np):
            handle, array = None, obj
        else:
            raise DpnbError(f"{operation}: item {i} is a {type(obj).__name__}; expected an "
                            "NdArray (e.g. x.grad) or a NumPy/CuPy array")
        if array.dtype not in STAGE_DTYPES:
            raise DpnbError(f"{operation}: item {i} has dtype {array.dtype}; supported are "
                            f"{', '.join(str(d) for d in STAGE_DTYPES)}")
        if not array.flags.c_contiguous:
            raise DpnbError(f"{operation}: item {i} (shape {tuple(array.shape)}) is not "
                            "C-contiguous (a transposed or strided view), so the result cannot "
                            "be written back into it; pass the array it was taken from, or a "
                            "contiguous copy (np.ascontiguousarray) and copy the result back")
        if isinstance(array, np.ndarray) and not array.flags.writeable:
            raise DpnbError(f"{operation}: item {i} is read-only; the result is written back "
                            "into the given arrays, so pass writable ones")
        arrays.append(array)
        handles.append(handle)
    return arrays, handles


def require_float(operation: str, arrays: list) -> None:
    """Refuse ``division=True`` over arrays that are not floating point."""
    for i, a in enumerate(arrays):
        if a.dtype.kind != "f":
            raise DpnbError(f"{operation}: division=True needs floating-point arrays, but item "
                            f"{i} has dtype {a.dtype}; gradients must be float (cast the array, "
                            "or sum without division)")
