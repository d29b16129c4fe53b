"""How many of dpnb's files a reader opens to follow two everyday paths, and how often
the path comes back to a file already opened, for this checkout and a reference
revision measured in the same run.

1. gradient: the tutorial's step ``comm.all_reduce([x.grad for x in
   nn.get_parameters().values()], division=True)``, its first call (the plan is built
   there), on rank 0 of two MPI ranks (``mpiexec -n 2``);
2. cell: a ``%%px`` cell (``x = rank``) run by ``shell.run_cell`` in an IPython shell with
   the ``dpnb`` extension loaded and a cluster of 2 engines started by ``dpnb.start``,
   in the driver's main thread.

The path is what a reader follows: the dpnb functions called, each once, in the order
of their first call (``sys.setprofile``); consecutive functions of one file are one
visit.  "files" counts the distinct files, "returns" the visits to a file visited
before.  The reference tree is a temporary ``git worktree`` of ``--reference`` (by
default cac59f8, the code before issue 25's moves, ``revisions.py``); each path runs
with ``PYTHONPATH`` set to the tree measured.  Counting, not timing; yet a wait that
ends in its first stage (polls back to back) calls less than one that goes on to its
second, so each path runs ``--repeats`` times and the table shows the median and the
range.  Prints a table; ``--record`` writes it to benchmarks/results/code_paths.json,
``--json PATH`` to PATH.

    python benchmarks/code_paths.py [--reference REV] [--paths gradient,cell]
                                    [--repeats 3] [--show] [--json PATH] [--record]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from revisions import BEFORE_ISSUE_25, REPO, checked_out, short
from timing import add_output_options, output_of

# Installed in each measured process: the reader's path through the dpnb files of its tree.
TRACER = """
import os, sys, threading
DPNB = os.path.join(os.environ["CODE_PATHS_TREE"], "dpnb") + os.sep
_seen, _order = set(), []

def _profile(frame, event, arg):
    if event == "call":
        code = frame.f_code
        if code.co_filename.startswith(DPNB) and code not in _seen:
            _seen.add(code)
            _order.append((os.path.relpath(code.co_filename, DPNB), code.co_qualname))

def start():
    sys.setprofile(_profile)

def stop():
    sys.setprofile(None)
    return list(_order)
"""

GRADIENT = """
import numpy as np
import dpnb as nn
import dpnb.communicators as C
import dpnb.functions as F
import dpnb.parametric_functions as PF
from dpnb.ext_utils import get_extension_context

ctx = get_extension_context("cpu")
nn.set_default_context(ctx)
comm = C.MultiProcessCommunicator(ctx)
comm.init()
x = nn.Variable((4, 3))
x.d = np.random.RandomState(comm.rank).rand(4, 3)
loss = F.mean(PF.affine(F.relu(PF.affine(x, 5, name="fc1")), 1, name="fc2"))
loss.forward()
loss.backward()
grads = [p.grad for p in nn.get_parameters().values()]
tracer.start()
comm.all_reduce(grads, division=True)
order = tracer.stop()
if comm.rank == 0:
    print("PATH", json.dumps(order))
"""

CELL = """
import IPython
from IPython.testing.globalipapp import start_ipython
import dpnb

shell = start_ipython()
shell.run_line_magic("load_ext", "dpnb")
cluster = dpnb.start(n=2, timeout=120)
try:
    shell.run_cell("%%px\\nx = rank")          # the first cell sets up what later ones reuse
    tracer.start()
    result = shell.run_cell("%%px\\nx = rank")
    order = tracer.stop()
    assert result.success, result
finally:
    cluster.stop()
print("PATH", json.dumps(order))
"""


def program(body: str) -> str:
    """A script that defines ``tracer`` (the module above) and runs ``body``."""
    return ("import json, types\ntracer = types.ModuleType('tracer')\n"
            f"exec({TRACER!r}, tracer.__dict__)\n" + textwrap.dedent(body))


def run(tree: Path, path: str) -> list[tuple[str, str]]:
    """The functions of ``tree``'s dpnb that ``path`` calls, in order of first call."""
    env = {**os.environ, "PYTHONPATH": str(tree), "CODE_PATHS_TREE": str(tree),
           "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as home:
        env["IPYTHONDIR"] = home
        script = Path(home) / f"{path}.py"
        script.write_text(program(GRADIENT if path == "gradient" else CELL))
        command = [sys.executable, str(script)]
        if path == "gradient":
            mpiexec = Path(sys.executable).with_name("mpiexec")
            command = [str(mpiexec), "-n", "2", *command]
        done = subprocess.run(command, env=env, cwd=home, capture_output=True, text=True,
                              timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("PATH ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{path} in {tree} failed ({done.returncode}):\n"
                         f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return [tuple(f) for f in json.loads(lines[0][len("PATH "):])]


def visits(order: list[tuple[str, str]]) -> list[str]:
    """The files in the order a reader opens them (consecutive functions of a file: one)."""
    files: list[str] = []
    for file, _ in order:
        if not files or files[-1] != file:
            files.append(file)
    return files


def summary(order: list[tuple[str, str]]) -> dict:
    path = visits(order)
    returns = len(path) - len(set(path))
    inside = [f for i, f in enumerate(path) if f in path[:i]]
    return {"files": len(set(path)), "returns": returns, "functions": len(order),
            "returns_inside_communicators": sum(f.startswith("communicators") for f in inside),
            "visits": path}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", default=BEFORE_ISSUE_25)
    parser.add_argument("--paths", default="gradient,cell")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--show", action="store_true", help="print each path's files")
    add_output_options(parser, "code_paths")
    args = parser.parse_args()
    output = output_of(args)
    paths = args.paths.split(",")
    results: dict = {"benchmark": "code_paths", "reference": args.reference,
                     "revision": short()}
    with checked_out(args.reference) as reference:
        for path in paths:
            results[path] = {tree: [summary(run(root, path)) for _ in range(args.repeats)]
                             for tree, root in (("reference", reference), ("this", REPO))}
    counts = ("files", "returns", "returns_inside_communicators", "functions")
    print(f"{'path':10} {'tree':10} {'files':>8} {'returns':>8} {'in comm.':>8} {'functions':>9}"
          f"   (median, range over {args.repeats} runs)")
    for path in paths:
        for tree in ("reference", "this"):
            runs = results[path][tree]
            shown = []
            for count in counts:
                values = sorted(r[count] for r in runs)
                shown.append(f"{statistics.median(values):g}" + (
                    f" ({values[0]}-{values[-1]})" if values[0] != values[-1] else ""))
            print(f"{path:10} {tree:10} " + " ".join(f"{v:>8}" for v in shown))
            if args.show:
                print("    " + " > ".join(runs[0]["visits"]))
    output.write(results, indent=2)


if __name__ == "__main__":
    main()
