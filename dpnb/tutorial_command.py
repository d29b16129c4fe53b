"""``dpnb tutorial``: run the English tutorial notebook headless against a fresh local cluster.

The notebook runs in its own Jupyter kernel (nbclient) with a private
IPYTHONDIR, so the cluster it starts is new and its files are its own.  Every
process that inherited that IPYTHONDIR (kernel, controller, mpiexec, engines)
must be gone afterwards; the command fails if one is left, after killing it."""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager

from .errors import DpnbError

TUTORIALS = Path(__file__).resolve().parent / "tutorials"   # the notebooks dpnb ships
NOTEBOOK = "01_data_parallel_training.ipynb"
SHOWN = (("topology", "where the ranks ran"),
         ("comparison", "gradients before and after all_reduce"),
         ("training", "after the training loop"))


def processes_with_env(name: str, value: str) -> list:
    """This user's processes, other than this one, whose environment has ``name=value``."""
    import psutil

    found = []
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and p.environ().get(name) == value:
                found.append(p)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def reap(name: str, value: str, grace: float = 20.0) -> list[str]:
    """Wait up to ``grace`` s for the processes with ``name=value`` to exit; kill the rest and
    describe them."""
    import psutil

    deadline = time.monotonic() + grace
    left = processes_with_env(name, value)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = processes_with_env(name, value)
    described = []
    for p in left:
        try:
            described.append(f"pid {p.pid}: {' '.join(p.cmdline())[:200]}")
            p.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(left, timeout=10)
    return described


class ThisPythonKernel(AsyncKernelManager):
    """A kernel in this interpreter, where dpnb is, even if another "python3" kernel spec
    (of another Python) is installed for the user."""

    @property
    def kernel_spec(self) -> KernelSpec:
        from ipykernel.kernelspec import RESOURCES, get_kernel_dict

        return KernelSpec(resource_dir=RESOURCES, **get_kernel_dict())


def execute(path: Path, ipython_dir: str, timeout: float):
    """Run every cell of the notebook at ``path`` in a fresh kernel; the executed notebook."""
    import nbformat
    from nbclient import NotebookClient
    from traitlets.config import Config

    notebook = nbformat.read(path, as_version=4)
    # Unix sockets in the private directory: no kernel ports open to other users of the host.
    config = Config()
    config.KernelManager.transport = "ipc"
    config.KernelManager.ip = os.path.join(ipython_dir, "kernel")
    client = NotebookClient(notebook, timeout=int(timeout), kernel_manager_class=ThisPythonKernel,
                            config=config, resources={"metadata": {"path": str(path.parent)}})
    client.execute(env={**os.environ, "IPYTHONDIR": ipython_dir})
    return notebook


def tagged_text(notebook, tag: str) -> str:
    """The text outputs (streams and plain-text results) of the cell tagged ``tag``."""
    parts = []
    for cell in notebook.cells:
        if tag not in cell.get("metadata", {}).get("tags", []):
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stdout":
                parts.append(output["text"].rstrip("\n"))
            elif "text/plain" in output.get("data", {}):
                parts.append(output["data"]["text/plain"])
    return "\n".join(parts)


def rows_agree(comparison: str) -> tuple[bool, bool]:
    """From the comparison table's text: (ranks differ before all_reduce, all agree after)."""
    rows = [line.split() for line in comparison.splitlines()]
    before = [r[-1] for r in rows if r and r[0] == "before"]
    after = [r[-1] for r in rows if r and r[0] == "after"]
    return "NO" in before, bool(after) and all(a == "yes" for a in after)


def run(notebook: str | None = None, timeout: float = 300.0) -> int:
    """Execute the tutorial, print its before/after all_reduce table, check nothing is left."""
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    from .cluster.checks import require_mpi

    path = Path(notebook) if notebook else TUTORIALS / NOTEBOOK
    if not path.is_file():
        raise DpnbError(f"expected a notebook at {path}, found none; pass --notebook PATH")
    require_mpi()   # before a kernel starts, whose traceback would bury the fix
    print(f"running {path} in a fresh kernel against a fresh 2-engine local cluster", flush=True)
    failures = []
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dpnb-tutorial-") as ipython_dir:
        executed = None
        try:
            executed = execute(path, ipython_dir, timeout)
        except (CellExecutionError, CellTimeoutError) as e:
            failures.append(f"a cell of the notebook failed:\n{e}")
        except Exception as e:  # a kernel that died or did not start: report and clean up
            failures.append(f"the notebook could not be executed: {type(e).__name__}: {e}")
        finally:
            left = reap("IPYTHONDIR", ipython_dir)
        if left:
            failures.append("processes of the tutorial's cluster were still running after it "
                            "ended (killed now):\n  " + "\n  ".join(left))
    if executed is not None:
        for tag, title in SHOWN:
            print(f"\n== {title}\n{tagged_text(executed, tag)}")
        differed, agree = rows_agree(tagged_text(executed, "comparison"))
        if not differed:
            failures.append("expected the ranks' gradients to differ before all_reduce; "
                            "they did not")
        if not agree:
            failures.append("expected identical gradients on every rank after all_reduce; "
                            "the comparison table says otherwise")
    if failures:
        print("\n" + "\n".join(f"FAILED: {f}" for f in failures), file=sys.stderr)
        return 1
    print(f"\ntutorial finished in {time.monotonic() - start:.0f} s; "
          "no controller, mpiexec or engine process is left")
    return 0
