"""nnabla's ``ext_utils``: extensions by name, and their contexts."""
from __future__ import annotations

import importlib
from types import ModuleType

from .context import Context, require_cupy
from .errors import ExtensionUnavailableError

EXTENSIONS = ("cpu", "cuda", "cudnn")


def import_extension_module(ext_name: str) -> ModuleType:
    """The extension module ``ext_name`` ("cpu", "cuda", "cudnn"), as ``nnabla_ext.<ext_name>``.

    "cuda" and "cudnn" raise ``ExtensionUnavailableError`` (an ImportError)
    where CuPy or a GPU is missing."""
    if ext_name == "cuda.cudnn":  # nnabla's deprecated spelling
        ext_name = "cudnn"
    if ext_name not in EXTENSIONS:
        raise ExtensionUnavailableError(f"unknown extension {ext_name!r}: expected one of "
                                        f"{EXTENSIONS}")
    return importlib.import_module(f"dpnb.extensions.{ext_name}")


def list_extensions() -> list[str]:
    """The extensions this machine can run: "cpu", and "cuda" and "cudnn" where CuPy sees a GPU."""
    try:
        require_cupy()
    except ExtensionUnavailableError:
        return ["cpu"]
    return list(EXTENSIONS)


def get_extension_context(ext_name: str = "cpu", **kw) -> Context:
    """The context of extension ``ext_name``: ``<extension>.context(**kw)``, e.g.
    ``get_extension_context("cudnn", device_id="0", type_config="half")``.

    A GPU context on a machine without CuPy or a GPU raises an error saying so;
    there is no silent fallback to the CPU."""
    return import_extension_module(ext_name).context(**kw)
