"""The CuPy stand-in for tests (issue 29): ``cupy`` / ``cupyx`` backed by NumPy, under
this folder, installed for one test at a time where the real CuPy is absent.

``installed()`` puts this folder first on ``sys.path``, imports the stand-in and, on the
way out, removes every ``cupy*`` module and the path entry, and clears dpnb's
parameters, so that the next test sees a CPU-only machine again.  ``environment()``
gives the processes a test starts (MPI ranks, a fresh interpreter) the stand-in too.
The fixtures ``gpu``, ``gpu_environment`` and ``cupy_standin`` (in ``tests/conftest.py``)
wrap them; they stay out where the real CuPy is importable (test against it there)."""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)


def real_cupy_present() -> bool:
    if "cupy" in sys.modules:
        return not getattr(sys.modules["cupy"], "STANDIN", False)
    return importlib.util.find_spec("cupy") is not None


def _forget() -> None:
    for name in [n for n in sys.modules if n.split(".")[0] in ("cupy", "cupyx")]:
        del sys.modules[name]


def _drop_dpnb_arrays() -> None:
    """The stand-in's arrays die with it: dpnb's parameters and flat storage, which may
    hold them, start afresh (the device objects dpnb keeps go with the module)."""
    dpnb = sys.modules.get("dpnb")
    if dpnb is not None:
        dpnb.clear_parameters()


def environment(device_count: int = 1) -> dict[str, str]:
    """Variables under which a new Python process imports the stand-in as ``cupy``, with
    ``device_count`` GPUs: this folder first on ``PYTHONPATH``."""
    if real_cupy_present():
        raise RuntimeError("the real CuPy is importable here; the stand-in stays out")
    path = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path, "CUPY_STANDIN_DEVICE_COUNT": str(device_count)}


@contextlib.contextmanager
def installed(device_count: int = 1):
    """``import cupy`` gives the stand-in inside the block (``device_count`` GPUs)."""
    if real_cupy_present():
        raise RuntimeError("the real CuPy is importable here; the stand-in stays out")
    _forget()
    sys.path.insert(0, HERE)
    try:
        cupy = importlib.import_module("cupy")
        importlib.import_module("cupyx")
        cupy.cuda.runtime.set_device_count(device_count)
        yield cupy
    finally:
        sys.path.remove(HERE)
        _forget()
        _drop_dpnb_arrays()
