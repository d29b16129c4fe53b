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

    def __init__(self, nccl, group, wait, what):
        import cupy

        unique_id = np.zeros(_UNIQUE_ID_BYTES, np.int64)
        if group.rank == 0:
            unique_id[:] = nccl.get_unique_id()
        wait([group.comm.Ibcast(unique_id, root=0)], what)
        self.comm = nccl.NcclCommunicator(group.size, tuple(int(v) for v in unique_id),
                                          group.rank)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.average = (getattr(nccl, "NCCL_AVG", None)
                        if nccl.get_version() >= _AVERAGE_SINCE else None)


class NcclPipeline:
    """Issues the chunks of one operation as NCCL calls; same interface as
    ``mpi.Pipeline``: ``pump`` issues without waiting, ``drain`` issues the rest
    and waits for all of it."""

    def __init__(self, comm, nccl, nccl_group: NcclGroup, group, operation: str, root: int,
                 division: bool):
        self.comm = comm
        self.nccl = nccl
        self.nccl_group = nccl_group
        self.group = group
        self.operation = operation
        self.root = root
        me = group.rank
        receives = (operation == "all_reduce" or (operation == "reduce" and me == root)
                    or (operation == "bcast" and me != root))
        self.op = nccl.NCCL_SUM
        self.divide = division and receives
        if division and nccl_group.average is not None:
            self.op, self.divide = nccl_group.average, False
        self.queue: list = []
        self.issued: list = []
        self.done = None  # event recorded after the last issued call

    def add(self, chunks: list) -> None:
        self.queue.extend(chunks)

    def pending_requests(self) -> list:
        return []  # nothing of MPI's: the NCCL communicator is aborted on failure

    def pump(self) -> None:
        if not self.queue:
            return
        import cupy

        chunks, self.queue = self.queue, []
        stream = self.nccl_group.stream
        stream.wait_event(cupy.cuda.get_current_stream().record())  # the gradients are ready
        nccl, comm = self.nccl, self.nccl_group.comm
        nccl.groupStart()
        try:
            for chunk in chunks:
                view = chunk.view
                dtype = getattr(nccl, _TYPES[view.dtype.name])
                pointer = view.data.ptr
                if self.operation == "all_reduce":
                    comm.allReduce(pointer, pointer, view.size, dtype, self.op, stream.ptr)
                elif self.operation == "reduce":
                    comm.reduce(pointer, pointer, view.size, dtype, self.op, self.root,
                                stream.ptr)
                else:
                    comm.bcast(pointer, view.size, dtype, self.root, stream.ptr)
        finally:
            nccl.groupEnd()
        self.comm.collectives_issued += len(chunks)
        self.issued.extend(chunks)
        self.done = stream.record()

    def drain(self) -> None:
        self.pump()
        if self.done is None:
            return
        done = self.done
        try:
            self.comm._wait_until(lambda: done.done,
                                  lambda: self.comm._describe(self.operation, self.group))
        except BaseException:
            self.nccl_group.comm.abort()
            raise
        if self.divide:
            for chunk in self.issued:
                chunk.view /= self.group.size
        self.issued, self.done = [], None
