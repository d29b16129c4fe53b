"""The NCCL data path for GPU arrays, through CuPy's ``cupy.cuda.nccl``.

Used when the communicator's context is a GPU context, NCCL is available, and
every array of a call is a CuPy array.  Each stretch of a plan (a run of flat
storage, or one array) is one NCCL call; the calls of one operation go in one
NCCL group, which NCCL fuses, on a stream of the communicator's own that first
waits for the computation stream.  ``division=True`` uses NCCL's average
where the library has it.  Completion is awaited by polling a CUDA event, so
the wait is interruptible and bounded like the MPI path; a failed wait aborts
the NCCL communicator (its kernels would otherwise spin forever).  Group
set-up and the agreement check go over MPI."""
from __future__ import annotations

import numpy as np

from .plan import Collective

_UNIQUE_ID_BYTES = 128
_TYPES = {"float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64",
          "int32": "NCCL_INT32", "int64": "NCCL_INT64"}
_AVERAGE_SINCE = 21000  # NCCL 2.10 brought ncclAvg


def nccl_module():
    """CuPy's NCCL binding where CuPy has it and the library loads, else None."""
    try:
        from cupy.cuda import nccl
    except ImportError:
        return None
    return nccl if getattr(nccl, "available", False) else None


class NcclGroup:
    """An NCCL communicator over the members of one group, on this process's GPU."""

    def __init__(self, nccl, group, guard, what):
        import cupy

        unique_id = np.zeros(_UNIQUE_ID_BYTES, np.int64)
        if group.rank == 0:
            unique_id[:] = nccl.get_unique_id()
        guard.wait([group.comm.Ibcast(unique_id, root=0)], what)
        self.comm = nccl.NcclCommunicator(group.size, tuple(int(v) for v in unique_id),
                                          group.rank)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.average = (getattr(nccl, "NCCL_AVG", None)
                        if nccl.get_version() >= _AVERAGE_SINCE else None)


class NcclTransport:
    """Collectives of CuPy arrays over NCCL, waited for by ``guard`` (a ``Guard``);
    the NCCL communicator of a group is made on its first use, by every member at
    the same call.  ``issued`` counts the NCCL calls made."""

    def __init__(self, guard, nccl, device_id: int):
        self.guard = guard
        self.nccl = nccl
        self.device_id = device_id
        self.issued = 0
        self._groups: dict[str, NcclGroup] = {}

    def group(self, group) -> NcclGroup:
        nccl_group = self._groups.get(group.name)
        if nccl_group is None:
            import cupy

            cupy.cuda.Device(self.device_id).use()
            nccl_group = self._groups[group.name] = NcclGroup(
                self.nccl, group, self.guard, lambda: group.describe("NCCL set-up"))
        return nccl_group

    def pipeline(self, group, collective: Collective) -> "NcclPipeline":
        return NcclPipeline(self, group, collective)

    def all_gather(self, group, send, received) -> None:
        """Row ``i`` of ``received`` (CuPy, ``(size, send.size)``) gets group rank
        ``i``'s ``send``; waits for it."""
        self._one_call(group, "all_gather", lambda comm, dtype, stream: comm.allGather(
            send.data.ptr, received.data.ptr, send.size, dtype, stream), send.dtype)

    def reduce_scatter(self, group, send, received, division: bool) -> bool:
        """``received`` gets the sum over ranks of this rank's block of ``send``;
        returns whether it is already divided (NCCL's average, with ``division``)."""
        nccl_group = self.group(group)
        op = self.nccl.NCCL_SUM
        averaged = division and nccl_group.average is not None
        if averaged:
            op = nccl_group.average
        self._one_call(group, "reduce_scatter", lambda comm, dtype, stream: comm.reduceScatter(
            send.data.ptr, received.data.ptr, received.size, dtype, op, stream), send.dtype)
        return averaged

    def _one_call(self, group, operation: str, call, dtype) -> None:
        import cupy

        nccl_group = self.group(group)
        stream = nccl_group.stream
        stream.wait_event(cupy.cuda.get_current_stream().record())
        call(nccl_group.comm, getattr(self.nccl, _TYPES[dtype.name]), stream.ptr)
        self.issued += 1
        wait_on_stream(self.guard, nccl_group, stream.record(),
                       lambda: group.describe(operation))


class NcclPipeline:
    """Issues the chunks of one collective as NCCL calls; the pipeline interface
    of the MPI transport: ``pump`` issues without waiting, ``drain`` issues the
    rest and waits for all of it.  Making one sends nothing: the group's NCCL
    communicator, whose set-up goes over MPI, is made at the first issue, after
    the agreement check."""

    def __init__(self, transport: NcclTransport, group, collective: Collective):
        self.transport = transport
        self.nccl = transport.nccl
        self.group = group
        self.collective = collective
        self.nccl_group: NcclGroup | None = None
        self.op = self.nccl.NCCL_SUM
        self.divisor = collective.divisor  # what NCCL's result is still divided by
        self.queue: list = []
        self.issued: list = []
        self.done = None  # event recorded after the last issued call

    def _set_up(self) -> NcclGroup:
        """The group's NCCL communicator (made on its first use), and the reduction op:
        NCCL's average, where it has one, instead of dividing afterwards."""
        if self.nccl_group is None:
            self.nccl_group = self.transport.group(self.group)
            if self.divisor is not None and self.nccl_group.average is not None:
                self.op, self.divisor = self.nccl_group.average, None
        return self.nccl_group

    def load(self, chunks: list) -> "NcclPipeline":
        """Start over with ``chunks``; returns the pipeline."""
        self.queue, self.issued, self.done = list(chunks), [], None
        return self

    def add(self, chunks: list) -> None:
        self.queue.extend(chunks)

    def prepare(self) -> None:
        """Nothing to pack: NCCL reads the arrays where they lie."""

    def pending_requests(self) -> list:
        return []  # nothing of MPI's: the NCCL communicator is aborted on failure

    def pump(self) -> None:
        if not self.queue:
            return
        import cupy

        chunks, self.queue = self.queue, []
        nccl_group = self._set_up()
        stream = nccl_group.stream
        stream.wait_event(cupy.cuda.get_current_stream().record())  # the gradients are ready
        nccl, comm, c = self.nccl, nccl_group.comm, self.collective
        nccl.groupStart()
        try:
            for chunk in chunks:
                view = chunk.view
                dtype = getattr(nccl, _TYPES[view.dtype.name])
                pointer = view.data.ptr
                if c.operation == "all_reduce":
                    comm.allReduce(pointer, pointer, view.size, dtype, self.op, stream.ptr)
                elif c.operation == "reduce":
                    comm.reduce(pointer, pointer, view.size, dtype, self.op, c.root, stream.ptr)
                else:
                    comm.bcast(pointer, view.size, dtype, c.root, stream.ptr)
        finally:
            nccl.groupEnd()
        self.transport.issued += len(chunks)
        self.issued.extend(chunks)
        self.done = stream.record()

    def drain(self) -> None:
        self.pump()
        if self.done is None:
            return
        wait_on_stream(self.transport.guard, self.nccl_group, self.done,
                       lambda: self.group.describe(self.collective.operation))
        if self.divisor is not None:
            for chunk in self.issued:
                chunk.view /= self.divisor
        self.issued, self.done = [], None


def wait_on_stream(guard, nccl_group: NcclGroup, done, what) -> None:
    """Wait (interruptibly, with the timeout) for the event ``done``; a failed wait
    aborts the NCCL communicator, whose kernels would otherwise spin forever."""
    try:
        guard.wait_until(lambda: done.done, what)
    except BaseException:
        nccl_group.comm.abort()
        raise
