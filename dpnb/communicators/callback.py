"""``all_reduce_callback``: all-reduce gradients while backward is still running.

The gradients are cut into packs of about ``pack_size`` elements, from the end
of the list (backward reaches the last layers first).  A gradient is complete
once every function of the graph that reads its parameter has run backward;
the callback counts those readers when backward starts, and sends a pack as
soon as all of its gradients are complete.  Packs are sent in a fixed order,
the same on every rank, so the collectives always pair up."""
from __future__ import annotations

from ..ndarray import NdArray
from .agreement import Call, stable_hash


class AllReduceCallback:
    """Passed to ``Variable.backward(communicator_callbacks=...)``; reusable for
    several backward passes of the same graph."""

    def __init__(self, comm, group, objs: list, pack_size: int, division: bool, on_gpu: bool):
        self._comm = comm
        self._on_gpu = on_gpu  # NCCL may take every pack (or none: all go the same way)
        self._group = group
        self._division = division
        packs: list[list[int]] = []
        current: list[int] = []
        size = 0
        for i in reversed(range(len(objs))):
            count = int(objs[i].size)
            if current and size + count > pack_size:
                packs.append(current)
                current, size = [], 0
            current.insert(0, i)
            size += count
        packs.append(current)
        self._packs = [[objs[i] for i in pack] for pack in packs]
        self._plans = [comm._plan(pack, "all_reduce_callback", self._on_gpu)
                       for pack in self._packs]
        self._call = None  # the agreement check's description, made on first use
        # gradients the graph can tell complete; plain arrays count as complete only at the end
        self._pack_of = {id(obj): p for p, pack in enumerate(self._packs) for obj in pack
                         if isinstance(obj, NdArray)}
        self._reset()

    def _reset(self) -> None:
        self._pipeline = None  # made when backward starts
        self._waiting: dict[int, int] = {}    # id(gradient handle) -> readers still to run backward
        self._missing = [len(pack) for pack in self._packs]  # incomplete gradients per pack
        self._sent = 0                        # packs handed to the pipeline, in order
        self._canonical = False

    def on_finish_function_backward(self, fn) -> None:
        """Called by backward after ``fn``'s backward: count down its parameters' readers."""
        if self._pipeline is None:
            self._start(fn)
        for handle_id in {id(x.grad) for x in fn.inputs if x.parent is None and x.need_grad}:
            left = self._waiting.get(handle_id)
            if left is None:
                continue
            if left == 1:
                del self._waiting[handle_id]
                self._missing[self._pack_of[handle_id]] -= 1
            else:
                self._waiting[handle_id] = left - 1
        self._send_ready(everything=False)
        self._comm._run_pipeline(self._pipeline.pump, self._pipeline)

    def on_finish(self) -> None:
        """Called at the end of backward: send what is left and wait for all of it."""
        if self._pipeline is None:
            self._start(None)
        self._send_ready(everything=True)
        try:
            self._comm._run_pipeline(self._pipeline.drain, self._pipeline)
        finally:
            self._reset()

    def _start(self, first_fn) -> None:
        """Agree with the other ranks, and count each gradient's readers in the graph."""
        comm = self._comm
        comm._check_usable()
        plans = [comm._plan(pack, "all_reduce_callback", self._on_gpu)
                 for pack in self._packs]
        if plans != self._plans:  # arrays moved (flat storage grew): new schedules
            self._plans, self._call = plans, None
        if comm.check_agreement:
            if self._call is None:
                self._call = Call("all_reduce_callback", self._group.name,
                                  [spec for plan in self._plans for spec in plan.specs],
                                  division=self._division,
                                  bucket_bytes=self._plans[0].bucket_bytes,
                                  layout=stable_hash([plan.layout for plan in self._plans]))
            self._canonical = not comm._agree(self._group, self._call)
        device = all(plan.device for plan in self._plans)
        self._pipeline = comm._pipeline(self._group, "all_reduce", -1, self._division, device)
        readers = _readers(first_fn) if first_fn is not None else {}
        for handle_id, p in self._pack_of.items():
            count = readers.get(handle_id, 0)
            if count:
                self._waiting[handle_id] = count
            else:
                self._missing[p] -= 1  # not read by this graph: complete already

    def _send_ready(self, everything: bool) -> None:
        while self._sent < len(self._packs) and (everything or self._missing[self._sent] == 0):
            plan = self._plans[self._sent]
            self._pipeline.add(plan.canonical() if self._canonical else plan.chunks)
            self._sent += 1


def _readers(fn) -> dict[int, int]:
    """For the graph above ``fn``: id(gradient handle) -> number of functions that
    read the parameter and will run backward (the differentiable ones)."""
    counts: dict[int, int] = {}
    seen = {id(fn)}
    stack = [fn]
    while stack:
        f = stack.pop()
        leaves = set()
        for x in f.inputs:
            if x.parent is not None:
                if id(x.parent) not in seen:
                    seen.add(id(x.parent))
                    stack.append(x.parent)
            elif x.need_grad and f.differentiable:
                leaves.add(id(x.grad))
        for handle_id in leaves:
            counts[handle_id] = counts.get(handle_id, 0) + 1
    return counts
