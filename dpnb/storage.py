"""Flat parameter storage: the parameters of one dtype and device live in one
contiguous buffer, and their gradients in another, each parameter's ``.d`` and
``.g`` being views into them in creation order.

That makes "all gradients" one array: a single all_reduce, a solver update in
a few vectorised operations, one checksum.  ``Run`` describes a stretch of
variables that are adjacent in a storage, so solvers and communicators can
work on the covering region instead of on each array."""
from __future__ import annotations

import dataclasses
from types import ModuleType

import numpy as np

from .graph import Variable
from .ndarray import NdArray

_MIN_CAPACITY = 1 << 12


class FlatStorage:
    """Data and gradient buffers of one dtype and device.  Trainable parameters and
    the others (batch-norm running statistics) get separate storages."""

    def __init__(self, dtype, xp: ModuleType, trainable: bool):
        self.dtype = np.dtype(dtype)
        self.xp = xp
        self.trainable = trainable
        self.used = 0
        self._data = xp.zeros(0, self.dtype)
        self._grad = xp.zeros(0, self.dtype)
        self._members: list[tuple[Variable, int]] = []
        self._offsets: dict[int, int] = {}  # id(NdArray) -> offset, for data and grad handles
        self._grad_handles: set[int] = set()

    @property
    def data(self):
        """All parameter data of this storage as one flat array (a view)."""
        return self._data[:self.used]

    @property
    def grad(self):
        """All parameter gradients as one flat array (a view)."""
        return self._grad[:self.used]

    @property
    def variables(self) -> list[Variable]:
        return [v for v, _ in self._members]

    def add(self, var: Variable, initial) -> None:
        """Give ``var`` the next stretch of the buffers, holding ``initial``."""
        size = var.size
        if self.used + size > self._data.size:
            self._grow(self.used + size)
        offset = self.used
        self.used += size
        self._members.append((var, offset))
        self._offsets[id(var.data)] = offset
        self._offsets[id(var.grad)] = offset
        self._grad_handles.add(id(var.grad))
        var.data.pin()
        var.grad.pin()
        self._point(var, offset)
        var.d = initial

    def offset_of(self, ndarray: NdArray) -> int | None:
        """Element offset of a parameter's data or gradient handle, or None if not here."""
        return self._offsets.get(id(ndarray))

    def kind_of(self, ndarray: NdArray) -> str | None:
        """Which flat buffer (``"data"`` or ``"grad"``) a parameter's handle views, or
        None if the handle is not here: lets a communicator fuse the handles it is given."""
        if id(ndarray) not in self._offsets:
            return None
        return "grad" if id(ndarray) in self._grad_handles else "data"

    def _grow(self, needed: int) -> None:
        capacity = max(_MIN_CAPACITY, needed, 2 * self._data.size)
        data = self.xp.zeros(capacity, self.dtype)
        data[:self.used] = self._data[:self.used]
        grad = self.xp.zeros(capacity, self.dtype)
        grad[:self.used] = self._grad[:self.used]
        self._data, self._grad = data, grad
        for var, offset in self._members:
            self._point(var, offset)

    def _point(self, var: Variable, offset: int) -> None:
        stop = offset + var.size
        var.data.bind(self._data[offset:stop].reshape(var.shape))
        var.grad.bind(self._grad[offset:stop].reshape(var.shape))


_storages: dict[tuple, FlatStorage] = {}


def _device_key(xp: ModuleType) -> str:
    return "cpu" if xp is np else f"cuda:{xp.cuda.Device().id}"


def storage_for(dtype, xp: ModuleType, trainable: bool) -> FlatStorage:
    key = (np.dtype(dtype).str, _device_key(xp), trainable)
    if key not in _storages:
        _storages[key] = FlatStorage(dtype, xp, trainable)
    return _storages[key]


def all_storages() -> list[FlatStorage]:
    return list(_storages.values())


def clear_storages() -> None:
    _storages.clear()


def locate(ndarray: NdArray) -> tuple[FlatStorage, int] | None:
    """The storage holding this data or gradient handle, and its offset there."""
    for storage in _storages.values():
        offset = storage.offset_of(ndarray)
        if offset is not None:
            return storage, offset
    return None


@dataclasses.dataclass
class Run:
    """Variables whose arrays are adjacent: a stretch of one flat storage, or a
    single variable outside any storage.  ``offsets`` are relative to the run."""

    variables: list[Variable]
    offsets: list[int]
    storage: FlatStorage | None = None
    start: int = 0

    @property
    def size(self) -> int:
        return self.offsets[-1] + self.variables[-1].size

    def data(self):
        if self.storage is None:
            return self.variables[0].d.reshape(-1)
        return self.storage.data[self.start:self.start + self.size]

    def grad(self):
        if self.storage is None:
            return self.variables[0].g.reshape(-1)
        return self.storage.grad[self.start:self.start + self.size]


def contiguous_runs(variables: list[Variable]) -> list[Run]:
    """Group ``variables``, kept in the given order, into runs of adjacent arrays."""
    runs: list[Run] = []
    for v in variables:
        found = locate(v.data)
        last = runs[-1] if runs else None
        if found is None:
            runs.append(Run([v], [0]))
            continue
        storage, offset = found
        if last is not None and last.storage is storage and last.start + last.size == offset:
            last.variables.append(v)
            last.offsets.append(offset - last.start)
        else:
            runs.append(Run([v], [0], storage, offset))
    return runs
