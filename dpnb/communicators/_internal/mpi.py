"""The MPI transport: runs a plan's chunks as non-blocking MPI collectives.

Its ``Pipeline`` issues the chunks one after the other: it packs bucket k+1
while bucket k is on the wire.  With ``division=True`` a stretch reduced in
place is scaled just before it is sent where that gives the same result (see
``Collective.scales_inputs``): the pass brings the segment into cache, where
MPI then reads it, instead of a pass over the result after it has left the
cache; otherwise each chunk is divided once it has arrived.  Packing and unpacking of many
small arrays is one local MPI copy through a datatype that lists them where
they lie; buckets are staged in a ``Stager``'s reused buffers."""
from __future__ import annotations

import collections
import weakref

import numpy as np

from .plan import Collective, Direct, Packed

STAGING_RING = 2  # staging buffers per dtype: one in flight, one being packed


def cuda_aware_mpi(comm) -> bool:
    """Whether MPI reads and writes CUDA device memory itself on ``comm``: MPI 4.1's
    memory allocation kinds name "cuda:device" there (MPICH >= 4.2, Open MPI >= 5)."""
    info = comm.Get_info()
    try:
        kinds = info.Get("mpi_memory_alloc_kinds") or ""
    finally:
        info.Free()
    return "cuda:device" in kinds.split(",")


_live_layouts = 0  # datatypes layout_type committed and not yet freed


def live_layout_types() -> int:
    """How many datatypes ``layout_type`` has made that are not freed yet: one per
    packed chunk still held by a plan, so bounded by the plan cache."""
    return _live_layouts


def _free_type(datatype) -> None:
    """Free a chunk's layout datatype when the chunk goes away (a plan dropped from
    the cache, or made again because its arrays moved)."""
    global _live_layouts
    from mpi4py import MPI

    _live_layouts -= 1
    if not MPI.Is_finalized():
        datatype.Free()


def layout_type(chunk: Packed):
    """An MPI datatype listing the pieces of ``chunk`` at their absolute addresses,
    so that packing and unpacking are one local MPI copy each, looped in C: for
    many small arrays much faster than a NumPy call per array.  None where the
    pieces need a cast (float16) or live on a GPU.  Made once per chunk, freed with
    it; built on the predefined type of the dtype, which needs no freeing (mpi4py's
    ``dtlib.from_numpy_dtype`` returns a duplicate that would)."""
    global _live_layouts
    layout = chunk.transport.get("mpi")
    if layout is None:
        if not chunk.host_only or len(chunk.entries) < 2 or any(
                view.dtype != chunk.dtype for view, _, _ in chunk.entries):
            layout = False
        else:
            from mpi4py import MPI

            layout = MPI.Datatype.fromcode(chunk.dtype.char).Create_hindexed(
                [count for _, _, count in chunk.entries],
                [MPI.Get_address(view) for view, _, _ in chunk.entries]).Commit()
            _live_layouts += 1
            weakref.finalize(chunk, _free_type, layout)
        chunk.transport["mpi"] = layout
    return layout or None


class MpiTransport:
    """Collectives over a group's MPI communicator (host memory, or device memory
    where MPI is CUDA-aware), waited for by ``guard`` (a ``Guard``); ``issued``
    counts the collectives posted."""

    def __init__(self, guard):
        self.guard = guard
        self.stager = Stager()
        self.issued = 0

    def pipeline(self, group, collective: Collective) -> "Pipeline":
        return Pipeline(self, group, collective)


class Pipeline:
    """Issues the chunks of one collective in order and finishes them (unpacking,
    dividing) as they complete.  One collective is in flight at a time while the
    next chunk is packed: with MPICH on shared memory, large non-blocking
    collectives in flight together run at a third of the speed or less of the
    same ones one after the other (measured by benchmarks/allreduce.py).

    What does not change from run to run (the MPI call, whether a stretch is
    scaled before it goes) is settled here, once: the exchange keeps a pipeline
    per collective and plan and ``load``s it at each run, since across hosts every
    microsecond of Python between MPI's polls delays the collective's protocol."""

    def __init__(self, transport: MpiTransport, group, collective: Collective):
        from mpi4py import MPI

        self.transport = transport
        self.group = group
        self.collective = collective
        self.queue: collections.deque = collections.deque()
        self.prepared = None  # (chunk, buffer) packed and ready to go
        self.current = None   # (request, chunk, buffer) in flight
        self._post = _poster(MPI, group.comm, collective)
        self._scales_first = collective.scales_inputs  # a direct stretch, before it goes
        self._divides_after = collective.divisor is not None and not self._scales_first

    def load(self, chunks: list) -> "Pipeline":
        """Start over with ``chunks`` (the run before finished, or failed and broke
        the communicator); returns the pipeline."""
        self.queue.clear()
        self.queue.extend(chunks)
        self.prepared = self.current = None
        return self

    def add(self, chunks: list) -> None:
        self.queue.extend(chunks)

    def pending_requests(self) -> list:
        return [self.current[0]] if self.current is not None else []

    def pump(self) -> None:
        """Finish what has completed and issue what may be issued, without blocking."""
        if self.current is not None and self.current[0].Test():
            self._complete()
        self._advance()

    def drain(self) -> None:
        """Issue and finish everything, waiting (interruptibly) as needed."""
        self._advance()
        wait = self.transport.guard.wait
        while self.current is not None:
            wait([self.current[0]], self._what)
            self._complete()

    def _complete(self) -> None:
        """The collective in flight has finished: a direct chunk is divided while the
        next one travels; a bucket is unpacked first, freeing its staging buffer."""
        _, chunk, buffer = self.current
        self.current = None
        if isinstance(chunk, Direct):
            self._advance()
            self._finish(chunk, buffer)
        else:
            self._finish(chunk, buffer)
            self._advance()

    def prepare(self) -> None:
        """Pack the next chunk to go (sending nothing), if none is packed yet."""
        if self.prepared is None and self.queue:
            self.prepared = self._prepare(self.queue.popleft())

    def _advance(self) -> None:
        """Issue the prepared chunk if nothing is in flight, and prepare the next."""
        self.prepare()
        if self.current is None and self.prepared is not None:
            self._issue(*self.prepared)
            self.prepared = self._prepare(self.queue.popleft()) if self.queue else None

    def _what(self) -> str:
        return self.group.describe(self.collective.operation)

    def _prepare(self, chunk) -> tuple:
        if isinstance(chunk, Direct):
            return chunk, chunk.view
        buffer = self.transport.stager.next(chunk.dtype, chunk.capacity)[:chunk.size]
        if self.collective.sends:
            _pack_into(chunk, buffer)
        return chunk, buffer

    def _issue(self, chunk, buffer) -> None:
        if not isinstance(buffer, np.ndarray):  # CUDA-aware MPI reads what kernels still write
            import cupy
            cupy.cuda.get_current_stream().synchronize()
        elif self._scales_first and isinstance(chunk, Direct):
            np.multiply(buffer, _reciprocal(buffer, self.collective.divisor), out=buffer)
        self.current = (self._post(buffer), chunk, buffer)
        self.transport.issued += 1

    def _finish(self, chunk, buffer) -> None:
        c = self.collective
        if not c.receives:
            return
        if not isinstance(chunk, Direct):
            _unpack_from(chunk, buffer, c.divisor)
        elif self._divides_after or (c.divisor is not None
                                     and not isinstance(buffer, np.ndarray)):
            np.multiply(buffer, _reciprocal(buffer, c.divisor), out=buffer)


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


def _poster(MPI, comm, c: Collective):
    """The non-blocking MPI call of this rank's part in ``c``, as ``post(buffer) -> request``."""
    if c.operation == "all_reduce":
        return lambda buffer: comm.Iallreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)
    if c.operation == "reduce" and c.receives:
        return lambda buffer: comm.Ireduce(MPI.IN_PLACE, buffer, op=MPI.SUM, root=c.root)
    if c.operation == "reduce":
        return lambda buffer: comm.Ireduce(buffer, None, op=MPI.SUM, root=c.root)
    return lambda buffer: comm.Ibcast(buffer, root=c.root)


def _reciprocal(buffer: np.ndarray, divisor: int):
    """``1 / divisor`` in the buffer's type: the mean is taken by multiplying, at
    twice the speed of dividing while the chunk is in cache; exact for powers of two,
    within one rounding of the quotient otherwise, and the same on every rank."""
    return buffer.dtype.type(1 / divisor)


def _pack_into(chunk: Packed, buffer: np.ndarray) -> None:
    layout = layout_type(chunk)
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
    layout = layout_type(chunk)
    if layout is not None:
        from mpi4py import MPI

        if divisor is not None:
            np.multiply(buffer, _reciprocal(buffer, divisor), out=buffer)
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
            np.multiply(part, _reciprocal(part, divisor), out=view, casting="same_kind")
        else:
            np.copyto(view, part, casting="same_kind")
