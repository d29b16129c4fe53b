"""The MPI data path: which memory each collective works on, and the pipeline
that issues the collectives.

A ``Plan`` turns a list of arrays into a schedule of chunks:

- ``Direct``: a contiguous stretch reduced where it lies, with no copy (on
  the GPU too, where MPI is CUDA-aware).
  Gradients that sit side by side in flat parameter storage form one such
  stretch (of any size), and so does any large array.  Long stretches are cut
  into cache-sized segments, which MPI moves two to three times as fast as one
  huge buffer on shared memory.
- ``Packed``: small arrays gathered into a staging buffer (a bucket) and
  written back afterwards, by one local MPI copy through a datatype that lists
  the arrays where they lie.

The ``Pipeline`` issues non-blocking collectives one after the other: it
packs bucket k+1 while bucket k is on the wire, and divides
(``division=True``) each chunk once, as it is written back."""
from __future__ import annotations

import collections
import dataclasses
import operator
import weakref

import numpy as np

from .. import storage as flat_storage
from .agreement import Call, stable_hash

DEFAULT_SEGMENT_BYTES = 2 << 20  # about one L2 cache; see benchmarks/allreduce.py
DEFAULT_BUCKET_BYTES = 2 << 20
STAGING_RING = 2  # staging buffers per dtype: one in flight, one being packed
_BACKING = operator.attrgetter("_array")  # an NdArray's current array (None if unallocated)
DIRECT_MIN_BYTES = 64 << 10  # smaller stretches are cheaper to pack together than to send alone
# dtypes the communicator moves, and the dtype they are staged and reduced in
STAGE_DTYPES = {np.dtype(t): np.dtype(s) for t, s in
                [("float16", "float32"), ("float32", "float32"), ("float64", "float64"),
                 ("int32", "int32"), ("int64", "int64")]}


@dataclasses.dataclass(eq=False)
class Direct:
    """A contiguous 1-D view, reduced in place (NumPy; CuPy on the NCCL path)."""

    view: np.ndarray


@dataclasses.dataclass(eq=False)
class Packed:
    """Pieces of arrays laid one after another in a staging buffer of ``dtype``."""

    dtype: np.dtype
    capacity: int  # elements of a full bucket: the staging buffer's size
    entries: list = dataclasses.field(default_factory=list)  # (flat view, offset, count)
    size: int = 0
    host_only: bool = True  # every piece is a NumPy array (else CuPy, staged through the host)
    # MPI datatype of the pieces where they lie, made on first use (False: none fits)
    _layout_type: object = dataclasses.field(default=None, repr=False)

    def layout_type(self):
        """An MPI datatype listing the pieces at their absolute addresses, so that
        packing and unpacking are one local MPI copy each, looped in C: for many
        small arrays, much faster than a NumPy call per array.  None where
        the pieces need a cast (float16) or live on a GPU."""
        if self._layout_type is None:
            if not self.host_only or len(self.entries) < 2 or any(
                    view.dtype != self.dtype for view, _, _ in self.entries):
                self._layout_type = False
            else:
                from mpi4py import MPI
                from mpi4py.util.dtlib import from_numpy_dtype

                layout = from_numpy_dtype(self.dtype).Create_hindexed(
                    [count for _, _, count in self.entries],
                    [MPI.Get_address(view) for view, _, _ in self.entries]).Commit()
                weakref.finalize(self, _free_type, layout)
                self._layout_type = layout
        return self._layout_type or None


def cuda_aware_mpi(comm) -> bool:
    """Whether MPI reads and writes CUDA device memory itself on ``comm``: MPI 4.1's
    memory allocation kinds name "cuda:device" there (MPICH >= 4.2, Open MPI >= 5)."""
    info = comm.Get_info()
    try:
        kinds = info.Get("mpi_memory_alloc_kinds") or ""
    finally:
        info.Free()
    return "cuda:device" in kinds.split(",")


def _free_type(datatype) -> None:
    from mpi4py import MPI

    if not MPI.Is_finalized():
        datatype.Free()


def _pointer(array) -> int:
    if isinstance(array, np.ndarray):
        return array.__array_interface__["data"][0]
    return array.data.ptr


def _storage_stretch(handle, array, bases: dict):
    """``(storage buffer key, buffer, start)`` if ``handle`` is a parameter's data
    or gradient still viewing its flat storage, else None."""
    found = flat_storage.locate(handle)
    if found is None:
        return None
    storage, offset = found
    for which in ("grad", "data"):
        key = (id(storage), which)
        if key not in bases:
            buffer = getattr(storage, which)
            bases[key] = (buffer, _pointer(buffer))
        buffer, base = bases[key]
        if _pointer(array) == base + offset * buffer.itemsize:
            return key, buffer, offset
    return None


class Plan:
    """The schedule for one list of arrays; reused while the arrays stay where they are."""

    def __init__(self, objs: list, arrays: list, handles: list, segment_bytes: int,
                 bucket_bytes: int, device: bool = False, direct_gpu: bool = False):
        self.objs = objs          # keeps the ids in the cache key valid
        self.device = device      # all CuPy arrays, for NCCL: one call per stretch, no staging
        self.direct_gpu = direct_gpu  # CUDA-aware MPI: CuPy stretches go to MPI where they lie
        self.arrays = arrays
        self.handles = handles
        self.bucket_bytes = bucket_bytes
        self.specs = [(a.dtype.str, tuple(a.shape)) for a in arrays]
        self.all_float = all(a.dtype.kind == "f" for a in arrays)
        self.all_handles = all(h is not None for h in handles)
        self.any_handles = any(h is not None for h in handles)
        self.chunks = self._layout_chunks(segment_bytes)
        self.layout = stable_hash([(type(c).__name__, _chunk_dtype(c).str, _chunk_size(c))
                                   for c in self.chunks])
        self._canonical = None
        self._specs_hash = stable_hash(self.specs)
        self._calls: dict = {}

    def still_valid(self) -> bool:
        """Whether every handle still points at the array this plan was made for
        (flat storage re-points them when it grows)."""
        if not self.any_handles:
            return True  # plain arrays: the cache key holds the very same objects
        if self.all_handles:
            # the slot itself, read in C: a property call per handle would dominate long lists
            return all(map(operator.is_, map(_BACKING, self.handles), self.arrays))
        return all(h is None or _BACKING(h) is a for h, a in zip(self.handles, self.arrays))

    def call(self, operation: str, group: str, root: int, division: bool) -> Call:
        """The agreement-check description of ``operation`` on these arrays (made once)."""
        key = (operation, group, root, division)
        call = self._calls.get(key)
        if call is None:
            call = self._calls[key] = Call(operation, group, self.specs, root, division,
                                           self.bucket_bytes, self.layout, self._specs_hash)
        return call

    def canonical(self) -> list:
        """A schedule that depends only on dtypes and shapes (every array packed), for
        ranks whose memory layouts differ."""
        if self._canonical is None and self.device:
            self._canonical = [Direct(a.reshape(-1)) for a in self.arrays]
        if self._canonical is None:
            chunks: list = []
            open_buckets: dict = {}
            for a in self.arrays:
                _pack(chunks, open_buckets, a.reshape(-1), self.bucket_bytes)
            self._canonical = chunks + list(open_buckets.values())
        return self._canonical

    def _layout_chunks(self, segment_bytes: int) -> list:
        stretches: list[list] = []  # [key, buffer, start, stop] or [None, flat array, 0, size]
        bases: dict = {}
        for a, h in zip(self.arrays, self.handles):
            found = (_storage_stretch(h, a, bases)
                     if h is not None and (self.device or self.direct_gpu
                                           or isinstance(a, np.ndarray)) else None)
            if found is None:
                stretches.append([None, a.reshape(-1), 0, a.size])
                continue
            key, buffer, start = found
            last = stretches[-1] if stretches else None
            if last is not None and last[0] == key and last[3] == start:
                last[3] += a.size
            else:
                stretches.append([key, buffer, start, start + a.size])
        if self.device:  # NCCL fuses the calls of a group itself
            return [Direct(buffer[start:stop]) for _, buffer, start, stop in stretches]
        chunks: list = []
        open_buckets: dict = {}
        for key, buffer, start, stop in stretches:
            view = buffer[start:stop]
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


def _chunk_dtype(chunk) -> np.dtype:
    return chunk.view.dtype if isinstance(chunk, Direct) else chunk.dtype


def _chunk_size(chunk) -> int:
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


class Pipeline:
    """Issues the chunks of one operation (``all_reduce``, ``reduce`` or
    ``bcast``) in order and finishes them (unpacking, dividing) as they
    complete.  One collective is in flight at a time while the next chunk is
    packed: with MPICH on shared memory, large non-blocking collectives in
    flight together run at a third of the speed or less of the same ones one
    after the other (measured by benchmarks/allreduce.py)."""

    def __init__(self, comm, group, operation: str, root: int, division: bool):
        self.comm = comm
        self.group = group
        self.operation = operation
        self.root = root
        me = group.rank
        self.sends = operation != "bcast" or me == root
        self.receives = (operation == "all_reduce" or (operation == "reduce" and me == root)
                         or (operation == "bcast" and me != root))
        self.divisor = group.size if division and self.receives else None
        self.queue: collections.deque = collections.deque()
        self.prepared = None  # (chunk, buffer) packed and ready to go
        self.current = None   # (request, chunk, buffer) in flight

    def add(self, chunks: list) -> None:
        self.queue.extend(chunks)

    def pending_requests(self) -> list:
        return [self.current[0]] if self.current is not None else []

    def pump(self) -> None:
        """Finish what has completed and issue what may be issued, without blocking."""
        from mpi4py import MPI

        if self.current is not None and MPI.Request.Testall([self.current[0]]):
            _, chunk, buffer = self.current
            self.current = None
            self._finish(chunk, buffer)
        self._advance()

    def drain(self) -> None:
        """Issue and finish everything, waiting (interruptibly) as needed."""
        self._advance()
        while self.current is not None:
            request, chunk, buffer = self.current
            self.comm._wait([request], self._what)
            self.current = None
            self._finish(chunk, buffer)
            self._advance()

    def _advance(self) -> None:
        """Issue the prepared chunk if nothing is in flight, and prepare the next."""
        if self.prepared is None and self.queue:
            self.prepared = self._prepare(self.queue.popleft())
        if self.current is None and self.prepared is not None:
            self._issue(*self.prepared)
            self.prepared = self._prepare(self.queue.popleft()) if self.queue else None

    def _what(self) -> str:
        return self.comm._describe(self.operation, self.group)

    def _prepare(self, chunk) -> tuple:
        if isinstance(chunk, Direct):
            return chunk, chunk.view
        buffer = self.comm._stager.next(chunk.dtype, chunk.capacity)[:chunk.size]
        if self.sends:
            _pack_into(chunk, buffer)
        return chunk, buffer

    def _issue(self, chunk, buffer) -> None:
        from mpi4py import MPI

        comm = self.group.comm
        if not isinstance(buffer, np.ndarray):  # CUDA-aware MPI reads what kernels still write
            import cupy
            cupy.cuda.get_current_stream().synchronize()
        if self.operation == "all_reduce":
            request = comm.Iallreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)
        elif self.operation == "reduce":
            send, receive = (MPI.IN_PLACE, buffer) if self.receives else (buffer, None)
            request = comm.Ireduce(send, receive, op=MPI.SUM, root=self.root)
        else:
            request = comm.Ibcast(buffer, root=self.root)
        self.comm.collectives_issued += 1
        self.current = (request, chunk, buffer)

    def _finish(self, chunk, buffer) -> None:
        if not self.receives:
            return
        if isinstance(chunk, Direct):
            if self.divisor is not None:
                buffer /= self.divisor
        else:
            _unpack_from(chunk, buffer, self.divisor)


def _pack_into(chunk: Packed, buffer: np.ndarray) -> None:
    layout = chunk.layout_type()
    if layout is not None:
        from mpi4py import MPI

        MPI.COMM_SELF.Sendrecv([MPI.BOTTOM, 1, layout], 0, 0, buffer, 0, 0)
        return
    if chunk.host_only:
        if len(chunk.entries) == 1:
            np.copyto(buffer, chunk.entries[0][0], casting="same_kind")
        else:
            np.concatenate([e[0] for e in chunk.entries], out=buffer, casting="same_kind")
        return
    for view, offset, count in chunk.entries:
        buffer[offset:offset + count] = view if isinstance(view, np.ndarray) else view.get()


def _unpack_from(chunk: Packed, buffer: np.ndarray, divisor) -> None:
    layout = chunk.layout_type()
    if layout is not None:
        from mpi4py import MPI

        if divisor is not None:
            np.divide(buffer, divisor, out=buffer)
        MPI.COMM_SELF.Sendrecv(buffer, 0, 0, [MPI.BOTTOM, 1, layout], 0, 0)
        return
    for view, offset, count in chunk.entries:
        part = buffer[offset:offset + count]
        if not isinstance(view, np.ndarray):
            import cupy
            view[...] = cupy.asarray(part).astype(view.dtype, copy=False)
            if divisor is not None:
                view /= divisor
        elif divisor is not None:
            np.divide(part, divisor, out=view, casting="same_kind")
        else:
            np.copyto(view, part, casting="same_kind")
