"""dpnb's modules import only downwards through its layers, and never in a cycle.

Every module is parsed with ``ast``; every import of a dpnb module counts, at module
level and inside functions alike.  The layers, lowest first:

0. core: contexts, arrays, the graph, storage, parameters, errors, random numbers,
   the file formats that need no more (``formats``: the protobuf schema, checked
   reads, parameter and solver-state codecs, file helpers, network-file containers),
   with the nnabla-named helpers that need no more (logger, monitor, ext_utils,
   extensions, nnabla_alias, data sets, data sources and iterators);
1. functions, parametric functions, solvers, initializers, the model zoo, and the
   network-file formats built on the functions (``formats``' function specs and
   messages, network and contents writers and readers) with nnabla's modules over
   them (utils.nnp_graph, utils.save, utils.load, utils.load_function);
2. communicators (and utils.communicator_util, nnabla's helper that builds one);
3. engine: what runs on the engines (``dpnb.cluster.engine``), which needs nothing of
   the code that starts and drives them;
4. display: what the notebook shows (tables, plots, the progress display, their
   labels), in ``dpnb.notebook`` but below the cluster, whose tables and after-cell
   display use it;
5. cluster: starting, attaching, driving and stopping clusters, and a cell's life;
6. notebook: inspection and the ``%dpnb`` magics in the notebook's kernel;
7. commands: ``dpnb`` (cli, ``__main__``), its tutorial runner, and the example programs
   (``dpnb.examples``), which report their progress to the notebook;
8. testing: the multi-process test harness (``dpnb.testing``), for tests and
   benchmarks only; it needs no more than the communicators.

A module may import its own layer and those below.  The package's ``__init__`` is
the public facade over all of them and is left out, as the cycle counter leaves it."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dpnb"

LAYERS = {
    "core": ["context", "host_memory", "kernels", "numba_loops", "ndarray", "graph", "storage", "parameter", "errors", "random", "config", "contrib", "hooks",
             "formats", "logger", "monitor", "ext_utils", "extensions", "nnabla_alias", "data", "dtypes",
             "utils", "utils.data_source", "utils.data_source_implements",
             "utils.data_source_loader", "utils.data_iterator", "utils.image_utils",
             "utils.get_file_handle", "utils.nnp_format", "utils.progress", "utils.create_cache",
             "utils.factorization"],
    "functions": ["functions", "function", "function_bases", "normalization_functions", "parametric_functions",
                  "solvers", "solver",
                  "initializer", "models", "utils.converter",
                  "formats.function_specs", "formats.function_messages", "formats.network_writer",
                  "formats.network_reader", "formats.contents_writer", "formats.contents_reader",
                  "utils.nnp_graph", "utils.save", "utils.load", "utils.load_function", "utils.rnn",
                  "utils.inspection", "utils.profiler",
                  "core", "grad", "backward_functions", "backward_function", "_dropout_workaround"],
    "communicators": ["communicators", "utils.communicator_util"],
    "engine": ["cluster.engine"],
    "display": ["notebook.table", "notebook.plot", "notebook.progress", "notebook.labels"],
    "cluster": ["cluster"],
    "notebook": ["notebook"],
    "commands": ["cli", "__main__", "tutorial_command", "examples"],
    "testing": ["testing"],
}
ORDER = list(LAYERS)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Dotted name (without the package's) -> file, for every module of the package."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imported(name: str, path: Path, node: ast.AST) -> list[str]:
    """Dotted names (relative to the package) an import statement may load."""
    if isinstance(node, ast.Import):
        return [a.name[len("dpnb."):] for a in node.names if a.name.startswith("dpnb.")]
    if node.level == 0:
        if node.module is None or not (node.module + ".").startswith("dpnb."):
            return []
        base = node.module[len("dpnb."):] if node.module != "dpnb" else ""
    else:
        here = name.split(".") if name else []
        if path.name != "__init__.py":
            here = here[:-1]
        if node.level - 1 > len(here):
            raise AssertionError(f"{path}: a relative import leaves the package")
        here = here[:len(here) - (node.level - 1)]
        base = ".".join(here + ([node.module] if node.module else []))
    return [base] + [f"{base}.{a.name}".lstrip(".") for a in node.names]


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (the facade ``__init__`` excluded)."""
    mods = modules(package)
    graph: dict[str, set[str]] = {name: set() for name in mods if name}
    for name, path in mods.items():
        if not name:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _imported(name, path, node):
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    graph[name].add(target)
    return graph


def layer_of(name: str) -> str | None:
    """The layer of a module: that of the longest listed prefix of its dotted name."""
    best, length = None, -1
    for layer, prefixes in LAYERS.items():
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > length:
                best, length = layer, len(prefix)
    return best


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a module from a higher layer than the importer's (modules in no
    layer are left to ``test_every_module_has_a_layer``)."""
    found = []
    for name, targets in sorted(graph.items()):
        for target in sorted(targets):
            if layer_of(name) is None or layer_of(target) is None:
                continue
            if ORDER.index(layer_of(target)) > ORDER.index(layer_of(name)):
                found.append(f"{name} ({layer_of(name)}) imports {target} ({layer_of(target)})")
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def test_every_module_has_a_layer():
    unplaced = [name for name in import_graph() if layer_of(name) is None]
    assert unplaced == [], f"modules in no layer (add them to LAYERS): {unplaced}"


def test_no_import_runs_up_the_layers():
    upward = upward_imports(import_graph())
    assert upward == [], "imports that run up the layers:\n  " + "\n  ".join(upward)


def test_no_import_cycles():
    found = cycles(import_graph())
    assert found == [], "import cycles:\n  " + "\n  ".join(" ".join(c) for c in found)


def test_the_test_harness_needs_no_more_than_the_communicators():
    allowed = ORDER[:ORDER.index("communicators") + 1] + ["testing"]
    beyond = [f"{name} imports {target} ({layer_of(target)})"
              for name, targets in sorted(import_graph().items()) if layer_of(name) == "testing"
              for target in sorted(targets) if layer_of(target) not in allowed]
    assert beyond == [], "dpnb.testing imports above the communicators:\n  " + "\n  ".join(beyond)


def test_nothing_in_dpnb_imports_the_test_harness():
    """Not even the facade ``__init__``, which the layer checks leave out."""
    found = []
    for name, path in modules().items():
        if layer_of(name) == "testing":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found += [f"{name or '__init__'} imports {target}"
                          for target in _imported(name, path, node)
                          if target == "testing" or target.startswith("testing.")]
    assert found == [], "imports of dpnb.testing inside dpnb:\n  " + "\n  ".join(found)


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "dpnb"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checks_catch_a_cycle_and_an_upward_import_inside_a_function(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "from . import graph\n",
        "graph.py": "def f():\n    from .functions import add\n",
        "functions/__init__.py": "from .add import add\n",
        "functions/add.py": "from ..graph import f\nimport dpnb.cluster.launcher\n",
        "cluster/__init__.py": "",
        "cluster/launcher.py": "from ..notebook.magics import dpnb_magic\n",
        "notebook/__init__.py": "",
        "notebook/magics.py": "import numpy\nfrom dpnb import errors\n",
    })
    graph = import_graph(root)
    assert graph["graph"] == {"functions", "functions.add"}
    assert graph["functions.add"] == {"graph", "cluster.launcher"}
    assert graph["notebook.magics"] == set()          # third-party and the facade are not edges
    assert cycles(graph) == [["functions", "functions.add", "graph"]]
    assert upward_imports(graph) == [
        "cluster.launcher (cluster) imports notebook.magics (notebook)",
        "functions.add (functions) imports cluster.launcher (cluster)",
        "graph (core) imports functions (functions)",
        "graph (core) imports functions.add (functions)",
    ]
