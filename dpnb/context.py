"""Contexts: which array module (NumPy or CuPy), device and float type a
computation uses.  Every function is written once against an array module
``xp``; the context decides which one it gets."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import weakref
from collections.abc import Callable, Iterator
from types import ModuleType

import numpy as np

from .errors import DpnbError, ExtensionUnavailableError

_TYPE_CONFIGS = {"float": np.float32, "double": np.float64, "half": np.float16}
_EXTENSIONS = ("cpu", "cuda", "cudnn")


@dataclasses.dataclass
class Context:
    """Where arrays live and what they compute with, as in nnabla.

    ``backend`` lists ``"<extension>:<type_config>"`` entries, first one wins;
    ``device_id`` is a string, as nnabla has it (``comm.init()`` sets it to the
    local rank)."""

    backend: list[str] = dataclasses.field(default_factory=lambda: ["cpu:float"])
    array_class: str = "CpuCachedArray"
    device_id: str = "0"

    @property
    def extension(self) -> str:
        return self.backend[0].split(":")[0]

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(_TYPE_CONFIGS[self.backend[0].split(":")[1]])

    @property
    def is_gpu(self) -> bool:
        return self.extension in ("cuda", "cudnn")

    @property
    def xp(self) -> ModuleType:
        """The array module of this context, resolved once; on a GPU context its device
        is made current where dpnb last switched to another one (no CUDA call otherwise)."""
        xp, device = self._resolve()
        if device is not None and device is not _active_device:
            _use(device)
        return xp

    def use_device(self) -> None:
        """Make this context's device CuPy's current one (nothing on the CPU): what a
        forward or backward pass does once, before its functions run."""
        device = self._resolve()[1]
        if device is not None:
            _use(device)

    def _resolve(self) -> tuple[ModuleType, object]:
        """(array module, CuPy device or None), worked out once per context and again
        only after its backend or device_id changed (``comm.init()`` sets device_id)."""
        key = (self.backend[0], self.device_id)
        resolved = self.__dict__.get("_resolved")
        if resolved is None or resolved[0] != key:
            if self.is_gpu:
                cupy = require_cupy()
                resolved = (key, cupy, _device(cupy, int(self.device_id)))
            else:
                resolved = (key, np, None)
            self.__dict__["_resolved"] = resolved
        return resolved[1], resolved[2]

    def __getstate__(self) -> dict:
        """Copies and pickles carry the fields only: a module does not pickle, and the
        copy resolves its own on first use."""
        state = dict(self.__dict__)
        state.pop("_resolved", None)
        return state


# One CuPy device object per GPU, shared by every context on it (kept no longer than
# the CuPy module that made it), and the one dpnb made current last, so that reading
# ``Context.xp`` switches only when it differs; a pass switches unconditionally
# (``Context.use_device``), which also undoes a switch made behind dpnb's back.
_devices: weakref.WeakKeyDictionary[ModuleType, dict[int, object]] = weakref.WeakKeyDictionary()
_active_device: object | None = None


def _device(cupy: ModuleType, number: int):
    devices = _devices.setdefault(cupy, {})
    if number not in devices:
        devices[number] = cupy.cuda.Device(number)
    return devices[number]


def _use(device) -> None:
    global _active_device
    device.use()
    _active_device = device


def require_cupy() -> ModuleType:
    """CuPy with at least one visible GPU, or an error that says how to get it."""
    try:
        import cupy
    except ImportError as e:
        raise ExtensionUnavailableError(
            "a 'cuda'/'cudnn' context needs CuPy, which is not installed; "
            "install it with `pip install 'dpnb[gpu]'` (cupy-cuda12x), or use "
            "get_extension_context('cpu') / dpnb.default_extension()") from e
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDA driver missing or broken
        raise ExtensionUnavailableError(f"CuPy is installed but no CUDA device is usable ({e}); "
                        "use get_extension_context('cpu') on this machine") from e
    if count == 0:
        raise ExtensionUnavailableError("CuPy is installed but this machine has no GPU; "
                        "use get_extension_context('cpu')")
    return cupy


def make_context(extension: str, device_id: int | str = 0, type_config: str = "float") -> Context:
    """Build a Context as nnabla's extensions do, with the checks behind
    ``get_extension_context``: backends in order of preference, the CPU last."""
    if extension not in _EXTENSIONS:
        raise DpnbError(f"unknown extension {extension!r}: expected one of {_EXTENSIONS}")
    if type_config not in _TYPE_CONFIGS:
        raise DpnbError(f"unknown type_config {type_config!r}: "
                        f"expected one of {tuple(_TYPE_CONFIGS)}")
    fallback = ["cpu:float"] if type_config == "half" else []
    if extension == "cpu":
        return Context([f"cpu:{type_config}"] + fallback, "CpuCachedArray", str(device_id))
    require_cupy()
    backend = [f"cudnn:{type_config}"] if extension == "cudnn" else []
    backend += [f"cuda:{type_config}", f"cpu:{type_config}"]
    return Context(backend, "CudaCachedArray", str(device_id))


def default_extension() -> str:
    """"cudnn" where this process can use a GPU, else "cpu": for code that must run anywhere."""
    try:
        require_cupy()
    except DpnbError:
        return "cpu"
    return "cudnn"


_current = Context()


def get_current_context() -> Context:
    """The context new variables, parameters and functions use now."""
    return _current


def with_current_context(func: Callable) -> Callable:
    """nnabla's ``function_api`` / ``solver_api`` decorator: ``func(ctx, *args, **kw)``
    becomes a callable of ``(*args, **kw)`` that passes the context current at each call."""
    params = list(inspect.signature(func).parameters.values())
    if not params or params[0].kind not in (params[0].POSITIONAL_ONLY,
                                            params[0].POSITIONAL_OR_KEYWORD):
        raise DpnbError(f"{getattr(func, '__name__', func)!r} must take the context as its first "
                        f"argument to be called with the current context, got the signature "
                        f"{inspect.signature(func)}")

    @functools.wraps(func)
    def called_with_current_context(*args, **kwargs):
        return func(_current, *args, **kwargs)

    called_with_current_context.__signature__ = inspect.signature(func).replace(
        parameters=params[1:])
    return called_with_current_context


def set_default_context(ctx: Context) -> None:
    """Make ``ctx`` the context new variables, parameters and functions use."""
    global _current
    if not isinstance(ctx, Context):
        raise DpnbError(f"set_default_context expects a Context, got {type(ctx).__name__}")
    _current = ctx


@contextlib.contextmanager
def context_scope(ctx: Context) -> Iterator[Context]:
    """Use ``ctx`` as the default context inside the ``with`` block."""
    previous = _current
    set_default_context(ctx)
    try:
        yield ctx
    finally:
        set_default_context(previous)


def array_module_of(array) -> ModuleType:
    """NumPy for NumPy arrays, CuPy for CuPy arrays."""
    if isinstance(array, np.ndarray):
        return np
    module = type(array).__module__.split(".")[0]
    if module == "cupy":
        import cupy
        return cupy
    return np


def to_module(array, xp: ModuleType):
    """``array`` as an array of module ``xp``, moving it between host and GPU if needed."""
    if array_module_of(array) is xp:
        return array
    if xp is np:
        return array.get()
    return xp.asarray(array)
