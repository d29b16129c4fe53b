"""The gradient reducer: the one owner of a gradient exchange.

``comm.gradient_reducer(solver)`` builds it from the solver's runs of flat
storage; ``comm.all_reduce(list)`` and ``comm.all_reduce_callback(list, ...)``
build the same object from a list of handles.  It keeps its plan (made again,
once, when flat storage grows and moves), its agreement signature, and its
packs for use during backward:

- after backward, ``reducer.all_reduce()`` sums (or averages) every gradient;
- during backward, as ``loss.backward(communicator_callbacks=reducer)``, it
  sends a pack of about ``pack_size`` elements, from the end (backward reaches
  the last layers first), as soon as every gradient in it is complete: once
  every function of the graph that reads its parameter has run backward.
  Packs go in a fixed order, the same on every rank, so the collectives pair up.
  The agreement check starts with backward and is waited for only when the
  first pack is ready, by when the other ranks have mostly started backward too:
  ranks that drift apart by a few milliseconds meet once a step, at its end."""
from __future__ import annotations

from ..errors import DpnbError
from ..ndarray import NdArray
from ._internal.agreement import Call
from ._internal.exchange import CachedPlan, Exchange, Group
from ._internal.plan import (Collective, Piece, Plan, address, pieces_of_runs, require_float,
                             stable_hash)

DEFAULT_PACK_SIZE = 2 << 20  # elements, as nnabla's get_all_reduce_callback


class SolverSource:
    """The gradients of a solver's parameters, read from its runs at each use."""

    def __init__(self, solver):
        self.solver = solver
        self._where: tuple = ()  # the runs, and where their gradients lay, at ``pieces()``

    def pieces(self) -> list[Piece]:
        runs = self.solver.runs
        if not runs:
            raise DpnbError(f"gradient_reducer: the {self.solver.name} solver has no parameters; "
                            "call solver.set_parameters(nn.get_parameters()) first")
        self._where = _where(runs)
        return pieces_of_runs(runs)

    def moved(self) -> bool:
        """Whether the solver's runs changed or their storage moved since ``pieces()``."""
        return _where(self.solver.runs) != self._where


def _where(runs: list) -> tuple:
    return tuple(map(id, runs)), tuple(address(run.grad()) for run in runs)


class GradientReducer:
    """All-reduces a fixed set of gradients, after backward (``all_reduce()``) or
    during it (passed to ``backward(communicator_callbacks=...)``)."""

    def __init__(self, exchange: Exchange, group: Group, cached: CachedPlan, division: bool,
                 pack_size: int, operation: str = "gradient_reducer", scale_grad: float = 1.0):
        if int(pack_size) <= 0:
            raise DpnbError(f"{operation}: pack_size must be a positive number of elements, "
                            f"got {pack_size}")
        if isinstance(scale_grad, bool) or not isinstance(scale_grad, (int, float)):
            raise DpnbError(f"{operation}: scale_grad must be a number (the factor each "
                            f"gradient is multiplied by before the sum), got {scale_grad!r}")
        self.exchange = exchange
        self.group = group
        self.division = bool(division)
        self.pack_size = int(pack_size)
        self.scale_grad = float(scale_grad)  # e.g. to cancel a loss scale before the sum
        self.operation = operation
        self._cached = cached
        self._packs_of: Plan | None = None  # the plan the packs below were cut from
        self._packs: list[Plan] = []
        self._pack_of: dict[int, int] = {}
        self._call: Call | None = None
        self._check(self._cached.plan())
        self._reset()

    @property
    def plan(self) -> Plan:
        """The current plan of the whole exchange (made again if the arrays moved)."""
        return self._check(self._cached.plan())

    def all_reduce(self) -> None:
        """Sum the gradients over the group (the mean with ``division``), in place."""
        self.exchange.guard.check_usable()
        plan = self.plan
        self._scale(plan.pieces)
        self.exchange.execute(self.group, plan, "all_reduce", -1, self.division)

    # -- the communicator-callback protocol of Variable.backward ---------------
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
        self.exchange.guard.run(self._pipeline.pump, self._pipeline.pending_requests)

    def on_finish(self) -> None:
        """Called at the end of backward: send what is left and wait for all of it."""
        if self._pipeline is None:
            self._start(None)
        self._send_ready(everything=True)
        try:
            self.exchange.guard.run(self._pipeline.drain, self._pipeline.pending_requests)
        finally:
            self._reset()

    # -- internals ------------------------------------------------------------
    def _check(self, plan: Plan) -> Plan:
        if self.division and not plan.all_float:
            require_float(self.operation, plan.items)
        return plan

    def _reset(self) -> None:
        self._pipeline = None   # made when backward starts
        self._waiting: dict[int, int] = {}  # id(gradient handle) -> readers still to run backward
        self._missing = [len(pack.pieces) for pack in self._packs]  # incomplete items per pack
        self._sent = 0          # packs handed to the pipeline, in order
        self._agreement = None  # the agreement check, until the first pack is ready
        self._canonical = False

    def _cut_packs(self, plan: Plan) -> None:
        """Packs of about ``pack_size`` elements from the end of the exchange order."""
        packs: list[list[Piece]] = []
        current: list[Piece] = []
        size = 0
        for piece in reversed(plan.pieces):
            if current and size + piece.view.size > self.pack_size:
                packs.append(current)
                current, size = [], 0
            current.insert(0, piece)
            size += piece.view.size
        packs.append(current)
        self._packs = [self.exchange.build_plan(pack, plan.device) for pack in packs]
        self._pack_of = {id(p.handle): k for k, pack in enumerate(packs) for p in pack
                         if isinstance(p.handle, NdArray)}
        self._call = Call("all_reduce_callback", self.group.name, plan.specs,
                          division=self.division, bucket_bytes=plan.bucket_bytes,
                          layout=stable_hash([pack.layout for pack in self._packs]),
                          arguments=(("scale_grad", self.scale_grad),))
        self._packs_of = plan

    def _start(self, first_fn) -> None:
        """Agree with the other ranks, and count each gradient's readers in the graph."""
        self.exchange.guard.check_usable()
        plan = self.plan
        if plan is not self._packs_of:  # first use, or the arrays moved
            self._cut_packs(plan)
            self._missing = [len(pack.pieces) for pack in self._packs]
        self.exchange.guard.enter("all_reduce_callback", self.group)
        self._agreement = self.exchange.deferred_check(self.group, self._call)
        self._pipeline = self.exchange.pipeline(
            self.group, Collective.of("all_reduce", self.group.rank, self.group.size, -1,
                                      self.division), plan.device)
        readers = _readers(first_fn) if first_fn is not None else {}
        for handle_id, k in self._pack_of.items():
            count = readers.get(handle_id, 0)
            if count:
                self._waiting[handle_id] = count
            else:
                self._missing[k] -= 1  # not read by this graph: complete already

    def _send_ready(self, everything: bool) -> None:
        if not (everything or self._sent < len(self._packs)
                and self._missing[self._sent] == 0):
            return  # no pack is complete yet
        self._settle_agreement()
        if self._canonical:  # layouts differ between ranks: everything at the end, in list order
            if everything and self._sent == 0:
                self._scale(self._packs_of.pieces)
                self._pipeline.add(self._packs_of.canonical())
                self._sent = len(self._packs)
            return
        while self._sent < len(self._packs) and (everything or self._missing[self._sent] == 0):
            self._scale(self._packs[self._sent].pieces)
            self._pipeline.add(self._packs[self._sent].chunks)
            self._sent += 1

    def _settle_agreement(self) -> None:
        """Take the agreement check's outcome when the first pack is ready to go: until
        then this rank runs backward while its peers arrive, where waiting for them at
        backward's start made a second meeting point per step (5-10 % of a 2-rank
        ResNet-23 step on a noisy machine).  A failed check leaves the next backward to
        start afresh."""
        check, self._agreement = self._agreement, None
        if check is None:
            return
        try:
            self._canonical = not check.settle()
        except BaseException:
            self._reset()
            raise

    def _scale(self, pieces: list[Piece]) -> None:
        """Multiply the gradients about to be summed by ``scale_grad`` (in place)."""
        if self.scale_grad != 1.0:
            for piece in pieces:
                piece.view *= self.scale_grad


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
