"""Runs of adjacent parameters as a solver updates them: flat states laid out like the
run, the slices an update works through (``CPU_SLICE`` elements at a time on the CPU,
whole on a GPU), and float32 buffers for float16 runs."""
from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence
from types import ModuleType

import numpy as np

from ..storage import Run

# Elements per slice of a CPU update: five float32 arrays of it (parameters, gradients,
# two states, scratch) take 1.3 MB, within one core's L2 cache.
CPU_SLICE = 1 << 16
# The type a parameter type's update computes and keeps its states in, where it differs.
_WIDER = {np.dtype(np.float16): np.dtype(np.float32)}


def arithmetic_dtype(dtype) -> np.dtype:
    """The type in which parameters of ``dtype`` are updated and their states kept:
    float32 for float16 parameters, else their own."""
    dtype = np.dtype(dtype)
    return _WIDER.get(dtype, dtype)


def slice_elements(xp: ModuleType, size: int) -> int:
    """Elements per slice of an update of ``size`` elements: ``CPU_SLICE`` on the CPU,
    all of them in one slice on a GPU."""
    return CPU_SLICE if xp is np else max(size, 1)


@dataclasses.dataclass
class Part:
    """One slice of a run that an update handles at a time, and the parameters it
    touches: ``first`` to ``stop`` (exclusive), starting at ``starts`` within the
    slice (for ``reduceat``) and covering ``counts`` of its elements."""

    slice: slice
    first: int
    stop: int
    starts: object
    counts: list[int]

    def add_square_sums(self, xp: ModuleType, x, tmp, sums) -> None:
        """Add each touched parameter's sum of ``x**2`` over this slice to ``sums``;
        ``x`` and ``tmp`` are this slice of a run's array and of scratch."""
        xp.multiply(x, x, out=tmp)
        sums[self.first:self.stop] += xp.add.reduceat(tmp, self.starts)

    def spread(self, xp: ModuleType, per_parameter):
        """The per-parameter values ``per_parameter`` repeated over this slice's elements."""
        return xp.repeat(per_parameter[self.first:self.stop], self.counts)


def cut_into_parts(offsets: Sequence[int], size: int, xp: ModuleType, step: int
                   ) -> list[Part]:
    """A run of ``size`` elements with parameters starting at ``offsets``, cut into
    slices of ``step`` elements (one slice on a GPU)."""
    parts = []
    starts = np.asarray(offsets, dtype=np.intp)
    ends = np.append(starts[1:], size)
    for lo in range(0, size, step):
        hi = min(lo + step, size)
        first, stop = bisect.bisect_right(offsets, lo) - 1, bisect.bisect_left(offsets, hi)
        local = np.maximum(starts[first:stop], lo) - lo
        counts = (np.minimum(ends[first:stop], hi) - lo - local).tolist()
        parts.append(Part(slice(lo, hi), first, stop, xp.asarray(local), counts))
    return parts


@dataclasses.dataclass
class RunState:
    """A run and what the solver keeps for it: flat state arrays laid out like the
    run, its step count, scratch buffers, the parameters' offsets (an array of
    ``xp``, for segment reductions) and sizes, and the slices of an update.
    States and scratch are in the run's arithmetic type; for a float16 run
    ``wide`` holds float32 buffers of one slice for its parameters and gradients."""

    run: Run
    names: list[str]
    xp: ModuleType
    state: dict[str, object]
    t: int
    scratch: object
    offsets: object
    sizes: tuple[int, ...]
    parts: list[Part]
    spare: object = None
    wide: tuple | None = None

    def parameter(self, index: int) -> "RunState":
        """The ``index``-th parameter alone, as a run of its own sharing this run's
        arrays and step count (to work on one parameter at a time)."""
        if len(self.names) == 1:
            return self
        offset, size = self.run.offsets[index], self.sizes[index]
        stretch = slice(offset, offset + size)
        run = Run([self.run.variables[index]], [0], self.run.storage, self.run.start + offset)
        step = slice_elements(self.xp, size)
        return RunState(run, [self.names[index]], self.xp,
                         {key: array[stretch] for key, array in self.state.items()}, self.t,
                         self.scratch[stretch], self.xp.zeros(1, dtype=np.intp), (size,),
                         cut_into_parts([0], size, self.xp, step),
                         None if self.spare is None else self.spare[stretch], self.wide)

    def slices(self) -> list[tuple[str, slice]]:
        """Each parameter's name and its stretch of the run's flat arrays."""
        return [(name, slice(offset, offset + size))
                for name, offset, size in zip(self.names, self.run.offsets, self.sizes)]

    def data(self, part: Part):
        """The parameters of ``part`` in the arithmetic type: a view of the run, or for
        a float16 run a float32 copy, which ``store`` writes back."""
        w = self.run.data()[part.slice]
        return w if self.wide is None else _widened(w, self.wide[0])

    def grad(self, part: Part):
        """The gradients of ``part`` in the arithmetic type (a float32 copy for float16)."""
        g = self.run.grad()[part.slice]
        return g if self.wide is None else _widened(g, self.wide[1])

    def store(self, part: Part, w) -> None:
        """Write the parameters ``w`` of ``part`` (from ``data``, updated) back into the
        run, rounding them to float16; a view of the run is already there."""
        if self.wide is not None:
            self.run.data()[part.slice] = w


def _widened(x, buffer):
    """``x`` copied into the start of ``buffer``, in its wider type."""
    wide = buffer[:x.size]
    wide[...] = x
    return wide
