"""``nnabla``, ``nnabla.*`` and ``nnabla_ext.*`` as names of dpnb's modules, so that
nnabla programs run on dpnb with no line changed.

An import hook maps ``nnabla.X`` to ``dpnb.X`` and ``nnabla_ext.X`` to
``dpnb.extensions.X``: both names give the same module object, so state
(parameters, contexts) is shared whichever name a program uses.  The real
nnabla is never shadowed: where it is installed, dpnb refuses to stand in."""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
from types import ModuleType

from .errors import DpnbError

logger = logging.getLogger(__name__)

ROOTS = {"nnabla": "dpnb", "nnabla_ext": "dpnb.extensions"}
# nnabla modules whose dpnb namesake is something else: importing them is an error.
UNRELATED = {"nnabla.models": "nnabla's pretrained models, which download their weights, "
                              "are not part of dpnb (dpnb.models is dpnb's own, unrelated)"}


def dpnb_name(fullname: str) -> str | None:
    """The dpnb module standing for ``fullname`` (``nnabla.functions`` -> ``dpnb.functions``),
    or None where ``fullname`` is not an nnabla name."""
    root, dot, rest = fullname.partition(".")
    target = ROOTS.get(root)
    if target is None:
        return None
    return f"{target}{dot}{rest}"


def unrelated_reason(fullname: str) -> str | None:
    """Why the nnabla module ``fullname`` is not its dpnb namesake, or None where it is."""
    return next((why for prefix, why in UNRELATED.items()
                 if fullname == prefix or fullname.startswith(prefix + ".")), None)


class _AliasLoader(importlib.abc.Loader):
    """Loads an nnabla name by importing its dpnb module and registering it under that name."""

    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a placeholder module, replaced in exec_module

    def exec_module(self, module: ModuleType) -> None:
        # The import system returns whatever sys.modules holds under the name
        # after exec_module, so the dpnb module itself answers, unchanged.
        sys.modules[module.__name__] = importlib.import_module(self.target)


class _NnablaFinder(importlib.abc.MetaPathFinder):
    """Finds ``nnabla`` names first in ``sys.meta_path``: their parents are dpnb
    packages, whose ``__path__`` would otherwise load second copies of dpnb modules."""

    def find_spec(self, fullname: str, path=None, target=None):
        name = dpnb_name(fullname)
        if name is None:
            return None
        unrelated = unrelated_reason(fullname)
        if unrelated is not None:
            raise ModuleNotFoundError(f"No module named {fullname!r}: {unrelated}",
                                      name=fullname)
        spec = importlib.util.find_spec(name)
        if spec is None:
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: dpnb, standing in for nnabla in this process "
                f"(dpnb.use_as_nnabla), has no {name!r}; docs/nnabla.md of dpnb lists the nnabla "
                "modules it provides", name=fullname)
        return importlib.util.spec_from_loader(
            fullname, _AliasLoader(name), is_package=spec.submodule_search_locations is not None)


_FINDER = _NnablaFinder()


def real_nnabla_location() -> str | None:
    """Where the real nnabla (or an nnabla extension) is imported or installed, else None.

    A folder of that name without ``__init__.py`` (a namespace package, such as the
    ``nnabla/`` that nnabla's tutorials ``git clone`` into the working directory) is
    not nnabla: only a package that defines ``nnabla`` counts."""
    if active():
        return None
    for root in ROOTS:
        module = sys.modules.get(root)
        if module is not None and getattr(module, "__file__", None) is not None:
            return module.__file__
        spec = importlib.util.find_spec(root) if module is None else None
        if spec is not None and spec.origin not in (None, "namespace"):
            return spec.origin
    return None


def active() -> bool:
    """Whether ``nnabla`` names resolve to dpnb in this interpreter."""
    return _FINDER in sys.meta_path


def use_as_nnabla() -> None:
    """Make ``import nnabla``, ``nnabla.*`` and ``nnabla_ext.*`` give dpnb's modules
    in this interpreter (a notebook, an engine, a script run by ``dpnb run``).

    A second call does nothing.  Modules dpnb lacks raise ``ModuleNotFoundError``
    naming them.

    Raises
    ------
    DpnbError
        Where the real nnabla is installed: dpnb never shadows it.
    """
    if active():
        return
    location = real_nnabla_location()
    if location is not None:
        raise DpnbError(
            f"the real nnabla is installed here ({location}), and dpnb does not shadow it; "
            "use it as it is, or run the program in an environment without nnabla, or "
            "import dpnb under its own name (import dpnb as nn)")
    for name in [name for name in sys.modules if dpnb_name(name) is not None]:
        del sys.modules[name]  # a namespace folder imported before: dpnb answers from now on
    sys.meta_path.insert(0, _FINDER)
    _alias_loaded_modules()
    logger.debug("nnabla names now resolve to dpnb")


def _alias_loaded_modules() -> None:
    """Register the dpnb modules already loaded under their nnabla names too.

    Importing ``nnabla.X`` for the first time would set attribute ``X`` of the
    package to the module, replacing what the package itself binds to that name:
    ``nnabla.logger`` is the Logger, as in nnabla, not the module ``dpnb.logger``."""
    for root, target in ROOTS.items():
        for name, module in list(sys.modules.items()):
            alias = root + name[len(target):]
            if name.startswith(target + ".") and unrelated_reason(alias) is None:
                sys.modules.setdefault(alias, module)


def use_as_nnabla_unless_installed() -> bool:
    """``use_as_nnabla()`` where the real nnabla is not importable; True if dpnb now stands in."""
    location = real_nnabla_location()
    if location is not None:
        logger.info("the real nnabla is installed (%s); nnabla names keep resolving to it",
                    location)
        return False
    use_as_nnabla()
    return True
