"""Nothing that arrives over MPI is unpickled: MPI is unauthenticated, and an unpickled
message runs whatever its sender chose.  Every module of dpnb that uses mpi4py is parsed
with ``ast``: it must not import pickle (or a pickler), nor call mpi4py's lowercase
methods, which pickle; values travel as arrays or JSON (``dpnb.communicators.values``)."""
from __future__ import annotations

import ast
from pathlib import Path

from test_import_graph import PACKAGE, _package

# mpi4py's methods that pickle what they send and unpickle what they receive
PICKLING = {"allgather", "allreduce", "alltoall", "bcast", "bsend", "exscan", "gather",
            "ibsend", "improbe", "irecv", "isend", "issend", "mprobe", "neighbor_allgather",
            "neighbor_alltoall", "recv", "reduce", "scan", "scatter", "send", "sendrecv", "ssend"}
PICKLERS = {"pickle", "_pickle", "cPickle", "cloudpickle", "dill", "mpi4py.util.pkl5"}


def _uses_mpi(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.startswith("mpi4py") for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mpi4py"):
            return True
    return False


def pickling_uses(package: Path = PACKAGE) -> list[str]:
    """Each import of a pickler, and each call of a pickling mpi4py method, in the modules
    of ``package`` that use mpi4py: "path:line what"."""
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        if not _uses_mpi(tree):
            continue
        where = path.relative_to(package.parent)
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                     if isinstance(node, ast.ImportFrom) else [])
            found += [f"{where}:{node.lineno} imports {n}" for n in names if n in PICKLERS]
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in PICKLING):
                found.append(f"{where}:{node.lineno} calls .{node.func.attr}()")
    return sorted(found)


def test_no_module_that_talks_mpi_pickles():
    found = pickling_uses()
    assert found == [], ("pickles over MPI (use buffers, or dpnb.communicators.values for "
                         "JSON):\n  " + "\n  ".join(found))


def test_the_scan_finds_pickles(tmp_path):
    root = _package(tmp_path, {
        "talks.py": "import pickle\nfrom mpi4py import MPI\nMPI.COMM_WORLD.allgather(1)\n",
        "later.py": "def f(comm):\n    from mpi4py.util import pkl5\n    return comm.bcast(1)\n",
        "quiet.py": "import pickle\ndef f(comm):\n    return comm.bcast(1)\n",  # no mpi4py
        "buffers.py": "from mpi4py import MPI\nMPI.COMM_WORLD.Allgather(b'', bytearray())\n"})
    assert pickling_uses(root) == [
        "dpnb/later.py:2 imports mpi4py.util.pkl5", "dpnb/later.py:3 calls .bcast()",
        "dpnb/talks.py:1 imports pickle", "dpnb/talks.py:3 calls .allgather()"]
