"""``cupy.cuda`` for the stand-in: devices, streams, events and memory pools, which do
nothing a GPU would do but check what CuPy checks (a device out of range fails when it is
made current, an unrecorded event has no time)."""
from __future__ import annotations

import threading
import time

from . import runtime
from .runtime import CUDARuntimeError  # noqa: F401  (as cupy.cuda exports it)
from .memory import MemoryPool, PinnedMemoryPool, get_allocator, set_allocator  # noqa: F401


class Device:
    """As ``cupy.cuda.Device`` (cupy/cuda/device.pyx): building one checks nothing; making
    it current (``use``, ``with``, ``synchronize``) raises ``CUDARuntimeError`` for an
    index out of range."""

    def __init__(self, device=None):
        self.id = runtime.getDevice() if device is None else int(device)

    def __int__(self):
        return self.id

    def __enter__(self):
        stack = _device_stack()
        current = runtime.getDevice()
        stack.append(current)
        if self.id != current:
            runtime.setDevice(self.id)
        return self

    def __exit__(self, *args):
        runtime.setDevice(_device_stack().pop())

    def __repr__(self):
        return f"<CUDA Device {self.id}>"

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(("Device", self.id))

    def use(self):
        runtime.setDevice(self.id)
        return self

    def synchronize(self):
        previous = runtime.getDevice()
        try:
            runtime.setDevice(self.id)
            runtime.deviceSynchronize()
        finally:
            runtime.setDevice(previous)

    @property
    def compute_capability(self) -> str:
        runtime._check(self.id)
        return "90"

    @property
    def mem_info(self) -> tuple[int, int]:
        runtime._check(self.id)
        return (80 << 30, 80 << 30)


_local = threading.local()


def _device_stack() -> list:
    if not hasattr(_local, "devices"):
        _local.devices = []
    return _local.devices


def _stream_stack() -> list:
    if not hasattr(_local, "streams"):
        _local.streams = []
    return _local.streams


def get_device_id() -> int:
    return runtime.getDevice()


class Event:
    """As ``cupy.cuda.Event``: ``record`` on a stream, ``synchronize``, ``done``; the time
    of a record is the host's clock at the call (no GPU timing here)."""

    def __init__(self, block=False, disable_timing=False, interprocess=False):
        if interprocess and not disable_timing:
            raise ValueError("Timing must be disabled for interprocess events")
        self.block, self.disable_timing = block, disable_timing
        self.ptr = id(self)
        self._time = None
        self.device_id = runtime.getDevice()

    def record(self, stream=None):
        stream = get_current_stream() if stream is None else stream
        if stream.device_id != self.device_id:
            raise CUDARuntimeError(runtime.cudaErrorInvalidResourceHandle,
                                   "cudaErrorInvalidResourceHandle",
                                   "invalid resource handle")
        self._time = time.perf_counter()

    def synchronize(self):
        pass

    @property
    def done(self) -> bool:
        return True


def get_elapsed_time(start_event: Event, end_event: Event) -> float:
    """Milliseconds between two recorded events (host clock here)."""
    for e in (start_event, end_event):
        if e.disable_timing or e._time is None:
            raise CUDARuntimeError(runtime.cudaErrorInvalidResourceHandle,
                                   "cudaErrorInvalidResourceHandle", "invalid resource handle")
    return (end_event._time - start_event._time) * 1000.0


class Stream:
    """As ``cupy.cuda.Stream``: ``with stream:`` makes it current, ``record`` returns an
    Event, ``wait_event`` takes one; everything is already done (no asynchrony here)."""

    null: "Stream"

    def __init__(self, null=False, non_blocking=False, ptr=0, device_id=-1):
        self.device_id = runtime.getDevice() if device_id < 0 else int(device_id)
        runtime._check(self.device_id)
        self.non_blocking = non_blocking
        self.ptr = 0 if null else (ptr or id(self))

    def __enter__(self):
        _stream_stack().append(self)
        return self

    def __exit__(self, *args):
        _stream_stack().pop()

    def use(self):
        stack = _stream_stack()
        if stack:
            stack[-1] = self
        else:
            stack.append(self)
        return self

    def synchronize(self):
        pass

    @property
    def done(self) -> bool:
        return True

    def record(self, event: Event | None = None) -> Event:
        if event is None:
            event = Event()
        event.record(self)
        return event

    def wait_event(self, event: Event) -> None:
        if not isinstance(event, Event):
            raise TypeError(f"Argument 'event' has incorrect type (expected "
                            f"cupy.cuda.stream.Event, got {type(event).__name__})")

    def __eq__(self, other):
        return isinstance(other, Stream) and (other.ptr, other.device_id) == (self.ptr,
                                                                                self.device_id)

    def __hash__(self):
        return hash((self.ptr, self.device_id))

    def __repr__(self):
        return f"<Stream {self.ptr} (device {self.device_id})>"


class _NullStream(Stream):
    def __init__(self):
        self.non_blocking, self.ptr = False, 0

    @property
    def device_id(self):
        return runtime.getDevice()


Stream.null = _NullStream()


def get_current_stream(device_id: int = -1) -> Stream:
    stack = _stream_stack()
    return stack[-1] if stack else Stream.null


def is_available() -> bool:
    return runtime.getDeviceCount() > 0
