"""What dpnb uses of ipyparallel and IPython beyond their documented API, and a check
that it is there.

dpnb's requirements cap both at the major versions it was tested with; within them a
release may still move what is listed here.  ``missing()`` names what moved and what
of dpnb it breaks: ``dpnb doctor`` prints it and a test fails on it, before a cluster
would fail half-way in a user's notebook."""
from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata


@dataclasses.dataclass(frozen=True)
class Internal:
    """``path`` (attributes from ``module`` down) and what dpnb does with it; with
    ``on_instances`` the last name is set on instances (``self.name = ...`` in the
    class's source) rather than declared on the class."""

    module: str
    path: str
    use: str
    on_instances: bool = False


_MAGICS = "ipyparallel.client.magics"
_LAUNCHERS = "ipyparallel.cluster.launcher"
INTERNALS = (
    Internal(_MAGICS, "ParallelMagics.progress_after_seconds",
             "keeps the task bar out of %%px cells (its subclass in cluster/view.py)"),
    Internal(_MAGICS, "ParallelMagics.stream_output",
             "shows the ranks' output in rank order (its subclass in cluster/view.py)"),
    Internal(_MAGICS, "ParallelMagics.verbose", "keeps %pxconfig across restarts"),
    Internal(_MAGICS, "ParallelMagics.last_result", "journals %%px cells (cluster/cells.py)"),
    Internal(_MAGICS, "ParallelMagics.view", "tells a stopped cluster's %%px (cluster/cells.py)"),
    Internal("ipyparallel.client.client", "Client._mux_stream",
             "gives GuardedView the socket ipyparallel's own DirectViews get (cluster/view.py)",
             on_instances=True),
    Internal("ipyparallel.engine.app", "IPEngine.kernel",
             "reaches the engine's kernel for progress and stack dumps"),
    Internal(_LAUNCHERS, "MPIEngineSetLauncher.find_args",
             "runs one-host clusters under gforker (cluster/mpi_engines.py)"),
    Internal(_LAUNCHERS, "MPIEngineSetLauncher.get_env",
             "keeps one-host MPI on loopback (cluster/mpi_engines.py)"),
    Internal(_LAUNCHERS, "LocalControllerLauncher.start",
             "makes the cluster file private (cluster/controller_launcher.py)"),
    Internal(_LAUNCHERS, "abbreviate_launcher_class",
             "names dpnb's launchers in cluster files by their entrypoint_name"),
    Internal("ipyparallel.client.asyncresult", "AsyncResult._children",
             "ends the tasks a dead controller will never answer (cluster/view.py)",
             on_instances=True),
    Internal("ipyparallel", "Cluster.engines",
             "finds the engine sets' processes and logs (cluster/launcher.py)"),
    Internal("ipyparallel", "Cluster.controller", "finds the controller process to stop it"),
    Internal("IPython.core.compilerop", "CachingCompiler.format_code_name",
             "names cells in brief communicator tracebacks (cluster/engine/brief_errors.py)"),
)


def _distribution(module: str) -> str:
    """The installed distribution and version that holds ``module``, for messages."""
    name = module.split(".")[0]
    distribution = "ipython" if name == "IPython" else name
    try:
        return f"{distribution} {importlib.metadata.version(distribution)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{distribution} (not installed)"


def _sets_attribute(cls, name: str) -> bool:
    """Whether class ``cls`` sets ``name`` on its instances (``self.name = ...`` in its
    source)."""
    import inspect

    try:
        return isinstance(cls, type) and f"self.{name} =" in inspect.getsource(cls)
    except (OSError, TypeError):
        return False


def missing(internals=INTERNALS) -> list[str]:
    """What of ``internals`` this environment lacks, each as what dpnb cannot do then."""
    problems = []
    for internal in internals:
        try:
            found = importlib.import_module(internal.module)
        except ImportError as e:
            problems.append(f"{internal.module} does not import ({e})")
            continue
        *path, last = internal.path.split(".")
        for name in path:
            found = getattr(found, name, None)
        there = (_sets_attribute(found, last) if internal.on_instances
                 else found is not None and hasattr(found, last))
        if not there:
            problems.append(f"{internal.module}.{internal.path} is gone in "
                            f"{_distribution(internal.module)}; dpnb uses it where it "
                            f"{internal.use}")
    return problems
