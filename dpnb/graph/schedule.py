"""The order and the passes of a graph: the functions up to some roots in order, what
each step may free, the backward plan, and forward and backward run from them.

A graph that is re-run keeps its schedule: the first ``forward``/``backward``
from a variable orders the functions it depends on and plans what to free and
where each gradient goes; later runs reuse that plan.  The functions upstream of
a variable never change by building more graph, so the plan stays valid until
something reshapes or rewires a graph (``reset_shape``, setting ``parent``),
which every plan notices through a global counter (``graph_changed``); the leaves'
``need_grad`` may change between runs, and the backward plan is checked against it.

The lowest of the graph's modules: it reads the variables and functions it is given
through their attributes, and imports neither (they import it)."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..context import to_module

_epoch = 0  # bumped whenever a graph is reshaped or rewired: plans made before are stale


def graph_changed() -> None:
    """Make every schedule made so far stale: a graph was reshaped or rewired."""
    global _epoch
    _epoch += 1


class ClearFlags:
    """What the graph passes released, function by function, while recording: per function
    forward ran, its inputs' (data, grad) ``clear_called`` flags after its step; per
    function backward ran, its outputs'.  nnabla's tests read them through
    ``nnabla.testing.clear_called_flag_recorder``."""

    def __init__(self):
        self.inputs: list[list[tuple[bool, bool]]] = []
        self.outputs: list[list[tuple[bool, bool]]] = []

    @staticmethod
    def of(variables: Sequence, seed_of=None) -> list[tuple[bool, bool]]:
        """The flags of ``variables``; ``seed_of``'s gradient for the pass was a seed the
        pass made and has released (nnabla's clear_buffer frees it there)."""
        return [(x._data.clear_called,
                 x is seed_of or (x._grad is not None and x._grad.clear_called))
                for x in variables]


_clear_flags: ClearFlags | None = None


def record_clear_flags(record: ClearFlags | None) -> None:
    """Record into ``record`` what the passes from now on release (None: stop recording)."""
    global _clear_flags
    _clear_flags = record


# What frees a variable whose ``recompute`` flag is set; backward computes such ones again.
FREED_FOR_RECOMPUTE = "forward, as the variable's recompute flag asks"


def schedule_of(v) -> Schedule:
    """The schedule of a pass from the variable ``v``: the one it keeps, made again where
    the graph changed since."""
    schedule = v._schedule
    if schedule is None or schedule.epoch != _epoch:
        schedule = v._schedule = Schedule([v])
    return schedule


class Schedule:
    """What running a graph up to some roots needs: its functions in order, the
    variables each step may free, and (per leaf ``need_grad`` state) the backward
    plan.  Valid while the graph epoch it was made in lasts."""

    def __init__(self, roots: list):
        self.epoch = _epoch
        self.order = functions_in_order(roots)
        # The outputs held for the schedule's life: functions hold theirs weakly, and the
        # passes key variables by identity.
        self.outputs = [y for fn in self.order for y in fn.outputs]
        # The device a pass makes current once, before its functions run (a GPU graph's).
        self.device_context = next((fn.context for fn in self.order if fn._xp is not np), None)
        for fn in self.order:
            fn._setup_again_if_reshaped()
        self.root_ids = {id(v) for v in roots}
        # Inputs of functions that keep them (F.sink's): no pass frees them.
        self.kept = {id(x) for fn in self.order if fn.keeps_inputs for x in fn.inputs}
        # Variables sharing their memory with a neighbour (an in-place view): forward keeps
        # them, as freeing one would not release the memory.
        self.views = {id(v) for fn in self.order if fn.output_views_input
                      for v in (*fn.inputs, *fn.outputs)}
        # Intermediates with the recompute flag: every forward frees them, backward computes
        # them again.
        self.recomputed = {id(x) for fn in self.order for x in fn.inputs
                           if x._parent is not None and x._recompute and id(x) not in self.views
                           and id(x) not in self.root_ids and id(x) not in self.kept}
        leaves: dict[int, object] = {}
        for fn in self.order:
            for x in fn.inputs:
                if x._parent is None:
                    leaves.setdefault(id(x), x)
        self.leaves = list(leaves.values())
        self._needs_for: tuple | None = None
        self._needs: dict[int, bool] = {}
        self._backward_plan: list = []
        self._slots: dict[int, int] = {}
        self._frees: dict[tuple, list[list[tuple]]] = {}

    # -- forward ----------------------------------------------------------
    def forward(self, roots: list, clear_buffer: bool, clear_no_need_grad: bool,
                pre: Callable | None, post: Callable | None) -> None:
        if self.device_context is not None:
            self.device_context.use_device()
        record = _clear_flags
        if not (clear_buffer or clear_no_need_grad or pre or post or record or self.recomputed):
            for fn in self.order:
                fn._run_forward()
            return
        frees = self._frees_for(clear_buffer, clear_no_need_grad)
        for step, fn in enumerate(self.order):
            if pre is not None:
                pre(fn)
            if any(id(y) in self.recomputed for y in fn.outputs) and fn.need_setup_recompute(0):
                fn.setup_recompute(fn.inputs, fn.outputs)  # to repeat this forward exactly
            fn._run_forward()
            if post is not None:
                post(fn)
            for x, by in frees[step]:
                if not x.persistent:
                    x._data.free(by)
            if record is not None:
                record.inputs.append(ClearFlags.of(fn.inputs))

    def _frees_for(self, clear_buffer: bool,
                   clear_no_need_grad: bool) -> list[list[tuple]]:
        """Per step, the intermediates that no later function reads and that the pass frees,
        each with what frees it: every one with ``clear_buffer``, those backward does not
        read either with ``clear_no_need_grad``, and those with the recompute flag; never
        the roots, in-place views, or the inputs of functions that keep them."""
        key = (clear_buffer, self._leaf_flags() if clear_no_need_grad else None)
        if key not in self._frees:
            if clear_buffer:
                flag, read = "forward(clear_buffer=True)", set()
            elif clear_no_need_grad:
                flag, read = "forward(clear_no_need_grad=True)", self._read_by_backward()
                read |= {id(x) for fn in self.order  # to compute recomputed ones again
                         if any(id(y) in self.recomputed for y in fn.outputs) for x in fn.inputs}
            last_use = {id(x): (step, x) for step, fn in enumerate(self.order) for x in fn.inputs}
            frees: list[list[tuple]] = [[] for _ in self.order]
            for key_id, (step, x) in last_use.items():
                if (x._parent is None or key_id in self.root_ids or key_id in self.kept
                        or key_id in self.views):
                    continue
                if key_id in self.recomputed:
                    frees[step].append((x, FREED_FOR_RECOMPUTE))
                elif (clear_buffer or clear_no_need_grad) and key_id not in read:
                    frees[step].append((x, flag))
            self._frees[key] = frees
        return self._frees[key]

    def _read_by_backward(self) -> set[int]:
        needs = self._grad_needs()
        read: set[int] = set()
        for fn in self.order:
            if any(needs[id(y)] for y in fn.outputs):
                if fn.grad_depends_on_inputs:
                    read.update(id(x) for i, x in enumerate(fn.inputs)
                                if i not in fn.grad_skips_inputs)
                if fn.grad_depends_on_outputs:
                    read.update(id(y) for y in fn.outputs)
        return read

    # -- backward ---------------------------------------------------------
    def _leaf_flags(self) -> tuple[bool, ...]:
        return tuple([x.need_grad for x in self.leaves])

    def _grad_needs(self) -> dict[int, bool]:
        """Which variables need a gradient now: leaves by their ``need_grad``,
        intermediates when a differentiable function links them to such a leaf.
        Re-derived (with the backward plan) only when a leaf's flag changed."""
        flags = self._leaf_flags()
        if flags != self._needs_for:
            self._needs = _grad_requirements(self.order)
            self._backward_plan, self._slots = self._make_backward_plan(self._needs)
            self._needs_for = flags
        return self._needs

    def _make_backward_plan(self, needs: dict[int, bool]) -> tuple[list, dict[int, int]]:
        """Per function that runs backward (last first): its outputs, their gradient
        handles and slots, its inputs' need_grads, and where each input's gradient
        goes: ``None``, ``(True, leaf gradient handle, move)`` (accumulate) or
        ``(False, slot, move)`` (pending), ``move`` the input's array module where
        it is not the function's, else None."""
        slots: dict[int, int] = {}
        for fn in self.order:
            for y in fn.outputs:
                slots[id(y)] = len(slots)
        reached = self._reached_by_gradients()
        plan = []
        for fn in reversed(self.order):
            if not any(needs[id(y)] and id(y) in reached for y in fn.outputs):
                continue
            need_grads = [needs[id(x)] for x in fn.inputs]
            targets = []
            for x, need in zip(fn.inputs, need_grads):
                move = x._data.xp if x._data.xp is not fn._xp else None
                if not need:
                    targets.append(None)
                elif x._parent is None:
                    targets.append((True, x.grad, move))
                else:
                    targets.append((False, slots[id(x)], move))
            plan.append((fn, fn.outputs, [y.grad for y in fn.outputs],
                         [slots[id(y)] for y in fn.outputs], need_grads, targets))
        return plan, slots

    def _reached_by_gradients(self) -> set[int]:
        """The variables a gradient can reach from the roots, through differentiable
        functions.  The others (those only non-differentiable functions read: the forward
        of the network a gradient graph was taken from, say) would only ever pass zeros
        back: their functions' backward is skipped."""
        reached = set(self.root_ids)
        for fn in reversed(self.order):
            if fn.differentiable and any(id(y) in reached for y in fn.outputs):
                reached.update(id(x) for x in fn.inputs)
        return reached

    def backward(self, root, seed, clear_buffer: bool, callbacks: list,
                 pre: Callable | None, post: Callable | None, made_seed: bool = False) -> None:
        if self.device_context is not None:
            self.device_context.use_device()
        self._grad_needs()
        pending: list = [None] * len(self._slots)
        pending[self._slots[id(root)]] = seed
        read = self._read_by_backward() if self.recomputed else None
        for fn, outputs, out_grads, out_slots, need_grads, targets in self._backward_plan:
            if read is not None:
                self._recompute_for(fn, read)
            if pre is not None:
                pre(fn)
            xp = fn._xp
            if xp is not np:
                xp = fn.context.xp
            gys = []
            for y, handle, slot in zip(outputs, out_grads, out_slots):
                gy = pending[slot]
                if gy is None:
                    gy = xp.zeros(handle.shape, handle.dtype)
                else:
                    pending[slot] = None
                    if y is not root and (not clear_buffer or y.persistent):
                        handle.take(gy, fn)
                gys.append(gy)
            if fn.grad_depends_on_inputs:
                skips = fn.grad_skips_inputs
                xs = [h.data for h in fn._in_handles] if not skips else [
                    None if i in skips else h.data for i, h in enumerate(fn._in_handles)]
                if fn._mixed:
                    xs = [x if x is None else to_module(x, xp) for x in xs]
            else:
                xs = None
            ys = [h.data for h in fn._out_handles] if fn.grad_depends_on_outputs else None
            gxs = fn.backward_arrays(xp, xs, ys, gys, need_grads)
            for target, gx in zip(targets, gxs):
                if target is None or gx is None:
                    continue
                is_leaf, where, move = target
                if move is not None:
                    gx = to_module(gx, move)
                if is_leaf:
                    where.accumulate(gx)
                else:
                    current = pending[where]
                    pending[where] = gx if current is None else current + gx
            if post is not None:  # the hook sees the inputs' gradients so far, as nnabla's
                for x, target in zip(fn.inputs, targets):
                    if target is not None and not target[0] and pending[target[1]] is not None:
                        x.grad.take(pending[target[1]], fn)
            if clear_buffer:
                for y, handle in zip(outputs, out_grads):
                    if not (y.persistent or y is root or id(y) in self.kept):
                        y._data.free("backward(clear_buffer=True)")
                        handle.free("backward(clear_buffer=True)")
            if _clear_flags is not None:
                _clear_flags.inputs.append(ClearFlags.of(fn.inputs))
                released = root if clear_buffer and made_seed and not root.persistent else None
                _clear_flags.outputs.append(ClearFlags.of(outputs, released))
            if post is not None:
                post(fn)
            for cb in callbacks:
                cb.on_finish_function_backward(fn)
        for cb in callbacks:
            cb.on_finish()

    def _recompute_for(self, fn, read: set[int]) -> None:
        """Compute again the arrays ``fn``'s backward reads that forward freed for recompute."""
        needed = []
        if fn.grad_depends_on_inputs:
            needed += [x for i, x in enumerate(fn.inputs) if i not in fn.grad_skips_inputs]
        if fn.grad_depends_on_outputs:
            needed += fn.outputs
        for v in needed:
            if v._data.freed_by == FREED_FOR_RECOMPUTE:
                self._compute_again(v, read)

    def _compute_again(self, v, read: set[int]) -> None:
        """Run ``v``'s function again (its freed inputs first, recursively, back to data that
        is there), then free again the inputs backward does not read."""
        fn = v._parent
        for x in fn.inputs:
            if x._data.freed_by == FREED_FOR_RECOMPUTE:
                self._compute_again(x, read)
        fn.recompute(fn.inputs, fn.outputs)
        for x in fn.inputs:
            if id(x) in self.recomputed and id(x) not in read and not x.persistent:
                x._data.free(FREED_FOR_RECOMPUTE)
        if _clear_flags is not None:
            _clear_flags.inputs.append(ClearFlags.of(fn.inputs))


def functions_in_order(roots: list, stops=()) -> list:
    """The functions ``roots`` depend on, each once, after all of its inputs' producers;
    none above the variables ``stops`` (they count as leaves)."""
    order: list = []
    seen: set[int] = set()
    for root in roots:
        if root._parent is None or root in stops or id(root._parent) in seen:
            continue
        stack: list[tuple] = [(root._parent, False)]
        while stack:
            fn, expanded = stack.pop()
            if expanded:
                order.append(fn)
                continue
            if id(fn) in seen:
                continue
            seen.add(id(fn))
            stack.append((fn, True))
            stack.extend((x._parent, False) for x in reversed(fn.inputs)
                         if x._parent is not None and x not in stops
                         and id(x._parent) not in seen)
    return order


def _grad_requirements(order: list) -> dict[int, bool]:
    """Which variables need a gradient now: leaves by their ``need_grad``,
    intermediates when a differentiable function links them to such a leaf, or as
    their ``need_grad`` says where it was set on them."""
    needs: dict[int, bool] = {}
    for fn in order:
        for x in fn.inputs:
            if x._parent is None:
                needs[id(x)] = x.need_grad
        flows = fn.differentiable and any(needs[id(x)] for x in fn.inputs)
        for y in fn.outputs:
            needs[id(y)] = y._need_grad if y._need_grad_set else flows
    return needs
