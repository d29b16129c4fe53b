"""Start, inspect, restart and stop a cluster of MPI engines (``dpnb.start``).

A thin layer over ``ipyparallel.Cluster(engines="mpi")``: engines run
``python -m dpnb.cluster.engine`` so engine ids equal MPI ranks, the view is ordered
by rank and blocking, start and stop print nothing, and every process the
cluster started is gone after ``stop()``, even where a polite shutdown fails."""
from __future__ import annotations

import atexit
import logging
import os
import sys
import time
import weakref
from collections.abc import Sequence

from ..errors import DpnbError
from . import engine_side
from .checks import require_mpi
from .table import Table

log = logging.getLogger(__name__)
# ipyparallel's own logging (launcher output, engine logs at stop) goes here, not into cells.
_ipp_log = logging.getLogger("dpnb.cluster.ipyparallel")
_ipp_log.addHandler(logging.NullHandler())
_ipp_log.propagate = False
_ipp_log.setLevel(logging.WARNING)  # at DEBUG, launchers copy engine output to stderr

ENGINE_CMD = [sys.executable, "-m", "dpnb.cluster.engine"]
NO_TASK_BAR = 10**7  # seconds
_running: weakref.WeakSet[Cluster] = weakref.WeakSet()
_current: Cluster | None = None


def default_n() -> int:
    """One engine per GPU, or per CPU core where there is no GPU."""
    from ..context import default_extension

    if default_extension() == "cudnn":
        import cupy
        return cupy.cuda.runtime.getDeviceCount()
    return os.cpu_count() or 1


def _process_tree(pid: int | None) -> list:
    """The process ``pid`` and all its descendants, as psutil handles."""
    import psutil

    if not pid or pid < 0:
        return []
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


class Cluster:
    """MPI-mode IPython-parallel engines, one per rank, driven from this process.

    ``n`` engines (default: GPUs, else CPU cores).  ``mpi_args`` go to mpiexec
    (e.g. ``["-f", "hostfile"]``), ``env`` into the engines' environment.
    ``engines`` picks another ipyparallel engine launcher ("slurm", "ssh", a
    class) that then runs the same entry point.  The controller listens on
    127.0.0.1 unless ``ip`` says otherwise (``"*"`` for every interface; then
    use ``curve=True`` for ipyparallel's CurveZMQ encryption).  Other keywords
    go to ``ipyparallel.Cluster``."""

    def __init__(self, n: int | None = None, *, engines: str | type = "mpi",
                 mpi_args: Sequence[str] = (), env: dict[str, str] | None = None,
                 timeout: float = 60.0, ip: str | None = None, location: str | None = None,
                 curve: bool = False, profile: str | None = None, profile_dir: str | None = None,
                 progress: bool = True, stop_at_exit: bool = True, **ipp_options):
        self.n = int(n) if n is not None else default_n()
        if self.n < 1:
            raise DpnbError(f"a cluster needs at least one engine, got n={self.n}")
        self.engines = engines
        self.mpi_args = list(mpi_args)
        self.env = dict(env or {})
        self.timeout = float(timeout)
        self.ip, self.location, self.curve = ip, location, curve
        self.profile, self.profile_dir = profile, profile_dir
        self.progress = progress
        self.stop_at_exit = stop_at_exit
        self.ipp_options = ipp_options
        self.ipp = None
        self.client = None
        self.view = None
        self._processes: list = []
        self._monitor = None

    # -- starting -----------------------------------------------------------------

    def _make_ipp_cluster(self):
        import ipyparallel as ipp
        from traitlets.config import Config

        config = Config()
        config.EngineLauncher.engine_cmd = list(ENGINE_CMD)
        config.EngineLauncher.environment = dict(self.env)
        if self.engines == "mpi":
            config.MPIEngineSetLauncher.mpi_cmd = [require_mpi()]
            config.MPIEngineSetLauncher.mpi_args = list(self.mpi_args)
        options = dict(engines=self.engines, n=self.n, config=config, log=_ipp_log,
                       shutdown_atexit=False, engine_timeout=int(self.timeout), delay=0,
                       load_profile=self.profile is not None)
        if self.profile is not None:
            options["profile"] = self.profile
        if self.profile_dir is not None:
            options["profile_dir"] = self.profile_dir
        if self.ip is not None:
            options["controller_ip"] = self.ip
        if self.location is not None:
            options["controller_location"] = self.location
        options.update(self.ipp_options)
        if self.curve:
            options["controller_args"] = [*options.get("controller_args", []),
                                          "--IPController.enable_curve=True"]
        return ipp.Cluster(**options)

    def start(self) -> Cluster:
        """Start the controller and ``n`` engines; return when all are ready (or raise)."""
        global _current
        if self.ipp is not None:
            raise DpnbError("this cluster is already running; call stop() or restart() first")
        self.ipp = self._make_ipp_cluster()
        _running.add(self)
        try:
            self.ipp.start_controller_sync()
            self.client = self.ipp.connect_client_sync()
            self._start_engines()
        except BaseException:
            self.stop()
            raise
        if self.ipp.cluster_file and os.path.exists(self.ipp.cluster_file):
            os.chmod(self.ipp.cluster_file, 0o600)  # process ids and paths: the owner's business
        _current = self
        return self

    def _start_engines(self) -> None:
        """Start one engine set and wait for it; on failure raise with the end of its log."""
        from ipyparallel.error import EngineError

        self.ipp.start_engines_sync(self.n)
        self._remember_processes()
        waiting = self.client.wait_for_engines(self.n, timeout=self.timeout, block=False,
                                               interactive=False)
        deadline = time.monotonic() + self.timeout + 5
        try:
            while not waiting.done():
                if self._engines_exited():
                    raise EngineError("the engine launcher (mpiexec) exited")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no answer from wait_for_engines in {self.timeout:g} s")
                time.sleep(0.1)
            waiting.result()
        except (TimeoutError, EngineError) as e:
            raise DpnbError(f"{self.n} engines did not start within {self.timeout:g} s ({e}); "
                            f"the end of the engine log:\n{self.log_tail()}") from None
        ids = sorted(self.client.ids)
        if ids != list(range(self.n)):
            raise DpnbError(f"engine ids {ids} do not equal the MPI ranks 0..{self.n - 1}; "
                            "were engines of another cluster registered? call restart()")
        self._remember_processes()
        self._open_view(ids)

    def _open_view(self, ids: list[int]) -> None:
        """The blocking, rank-ordered view; ``%%px`` and the progress display where IPython runs."""
        self.view = self.client.direct_view(targets=ids)
        self.view.block = True
        shell = _ipython()
        if shell is None:
            return
        self.view.activate()
        # ipyparallel shows a task bar with timings in cells running over 2 s, which makes
        # stored notebook outputs differ from run to run; a delay longer than any cell keeps
        # its wait for the result and then for all output, without the bar.
        shell.magics_manager.registry["ParallelMagics"].progress_after_seconds = NO_TASK_BAR
        if self.progress and self._monitor is None:
            from .progress import ProgressMonitor

            self._monitor = ProgressMonitor(self.client)
            self._monitor.start()
        if self._after_cell not in shell.events.callbacks["post_run_cell"]:
            shell.events.register("post_run_cell", self._after_cell)

    def _after_cell(self, result=None) -> None:
        """After each cell: finish its progress display, and name engines that died in it.

        A ``%%px`` cell that streams output reports engine deaths only as "N errors"
        (dead engines send no error message to stream), so the ranks are named here."""
        if self._monitor is not None:
            self._monitor.after_cell(result)
        error = getattr(result, "error_in_exec", None)
        original = getattr(error, "original_error", None)
        deaths = [str(e[1]) for e in getattr(original, "elist", []) if e[0] == "EngineError"]
        if deaths:
            print("\n".join(deaths) + "\nEngine ids are MPI ranks; under MPI the death of one "
                  "rank ends them all.  `cluster.restart()` (or `%dpnb restart`) starts fresh "
                  "engines.", file=sys.stderr)

    def _engines_exited(self) -> bool:
        """Whether a local engine launcher process (mpiexec) has exited."""
        import psutil

        for es in self.ipp.engines.values():
            process = getattr(es, "process", None)
            try:
                if process is not None and process.status() == psutil.STATUS_ZOMBIE:
                    return True
            except psutil.NoSuchProcess:
                return True
        return False

    def _remember_processes(self) -> None:
        """Record the controller's and engines' processes, so stop() can make sure they are gone."""
        import psutil

        pids = [getattr(self.ipp.controller, "pid", None)]
        pids += [getattr(es, "pid", None) for es in self.ipp.engines.values()]
        known = {(p.pid, p.create_time()) for p in self._processes if p.is_running()}
        for pid in pids:
            for p in _process_tree(pid):
                try:
                    key = (p.pid, p.create_time())
                except psutil.NoSuchProcess:
                    continue
                if key not in known:
                    known.add(key)
                    self._processes.append(p)

    @classmethod
    def attach(cls, profile: str = "mpi", cluster_id: str = "", timeout: float = 60.0) -> Cluster:
        """A cluster started by another process (``dpnb cluster start``), from its cluster file."""
        import ipyparallel as ipp

        try:
            loaded = ipp.Cluster.from_file(profile=profile, cluster_id=cluster_id, log=_ipp_log)
        except FileNotFoundError:
            raise DpnbError(f"no cluster is running in profile {profile!r}; start one with "
                            f"`dpnb cluster start --profile {profile}`") from None
        n = sum(es.n for es in loaded.engines.values())
        self = cls(max(n, 1), profile=profile, timeout=timeout, progress=False,
                   stop_at_exit=False)
        self.ipp = loaded
        if loaded.controller is None:
            self.stop()
            raise DpnbError(f"the controller of the cluster in profile {profile!r} is no longer "
                            f"running; its engines were stopped; start a new one with "
                            f"`dpnb cluster start --profile {profile}`")
        self.client = loaded.connect_client_sync()
        self._remember_processes()
        self._open_view(sorted(self.client.ids))
        return self

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the engines' output (the controller's if there are no engines).

        ``get_output`` keeps what it read: ipyparallel removes the file when the
        launcher notices the process exit."""
        launchers = list(self.ipp.engines.values()) if self.ipp else []
        if not launchers and self.ipp is not None and self.ipp.controller is not None:
            launchers = [self.ipp.controller]
        parts = []
        for launcher in launchers:
            text = "".join(launcher.get_output().splitlines(True)[-lines:])
            parts.append(text or "(the log is empty)")
        return "\n".join(parts)

    # -- looking at it --------------------------------------------------------------

    @property
    def pids(self) -> list[int]:
        """Process ids of every controller, mpiexec, engine and nanny process started."""
        return [p.pid for p in self._processes]

    def topology(self) -> Table:
        """Rank, engine id, host, pid and device of every engine."""
        self._require_running()
        rows = self.view.apply_sync(engine_side.where)
        table = [[r["rank"], eid, r["host"], r["pid"], r["local_rank"], r["device"]]
                 for eid, r in zip(self.view.targets, rows)]
        return Table(["rank", "engine id", "host", "pid", "local rank", "device"], table,
                     title=f"{self.n} MPI engines")

    def _require_running(self) -> None:
        if self.view is None:
            raise DpnbError("the cluster is not running; call start() (or restart()) first")

    # -- restarting and stopping --------------------------------------------------------

    def restart(self) -> Cluster:
        """Fresh engines (empty namespaces) with the same controller; ids equal ranks again."""
        if self.ipp is None:
            return self.start()
        self._stop_engines()
        deadline = time.monotonic() + self.timeout
        while self.client.ids and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.client.ids:
            raise DpnbError(f"engines {self.client.ids} were still registered {self.timeout:g} s "
                            "after being stopped; call stop() and start() instead")
        try:
            self._start_engines()
        except BaseException:
            self.stop()
            raise
        return self

    def _stop_engines(self, grace: float = 10.0) -> None:
        """Ask the engines to exit, wait for mpiexec, then let ipyparallel signal what is left."""
        import psutil

        self.view = None
        if self.client is not None and self.client.ids:
            try:
                self.client.shutdown(targets="all", block=False)
            except Exception as e:  # a dead controller: signals below still work
                log.debug("shutdown request failed: %s", e)
        for es in list(self.ipp.engines.values()):
            process = getattr(es, "process", None)
            if process is not None:
                try:
                    process.wait(timeout=grace)
                except psutil.TimeoutExpired:
                    log.debug("engines did not exit within %s s; signalling them", grace)
                except psutil.NoSuchProcess:
                    pass
        self.ipp.stop_engines_sync()

    def stop(self) -> None:
        """Stop engines and controller; kill whatever of them is still alive.  Idempotent."""
        global _current
        if self._monitor is not None:
            self._monitor.stop()
            self._monitor = None
        shell = _ipython()
        if shell is not None and self._after_cell in shell.events.callbacks["post_run_cell"]:
            shell.events.unregister("post_run_cell", self._after_cell)
        if self.ipp is not None:
            try:
                if self.ipp.engines:
                    self._stop_engines()
            finally:
                if self.client is not None:
                    self.client.close()
                    self.client = None
                try:
                    self.ipp.stop_controller_sync()
                finally:
                    self._kill_leftovers()
                    self.ipp = None
        self.view = None
        _running.discard(self)
        if _current is self:
            _current = None

    def _kill_leftovers(self) -> None:
        import psutil

        alive = [p for p in self._processes if p.is_running()]
        for p in alive:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=10)
        self._processes = []

    @property
    def running(self) -> bool:
        return self.view is not None

    def __enter__(self) -> Cluster:
        if self.ipp is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<dpnb.Cluster n={self.n} engines={self.engines!r} {state}>"


def _ipython():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def start(n: int | None = None, **options) -> Cluster:
    """Start ``n`` MPI engines (default: one per GPU, else per CPU core) and return the cluster.

    Options are those of ``Cluster``.  The cluster becomes the one that
    ``dpnb.gather`` and the ``%dpnb`` magics use."""
    return Cluster(n, **options).start()


def active() -> Cluster | None:
    """The cluster started last in this process if it is running, else None."""
    return _current if _current is not None and _current.running else None


def current() -> Cluster:
    """The cluster started last in this process, or an error that says how to start one."""
    if active() is None:
        raise DpnbError("no cluster is running in this process; start one with "
                        "`cluster = dpnb.start(n=2)` or `%dpnb start -n 2`")
    return _current


def stop_current() -> None:
    """Stop the current cluster, if there is one."""
    if _current is not None:
        _current.stop()


@atexit.register
def _stop_all() -> None:
    """Interpreter exit stops every cluster started here that asked for it."""
    for cluster in list(_running):
        if cluster.stop_at_exit:
            try:
                cluster.stop()
            except Exception as e:  # exiting anyway: note it and go on to the next cluster
                log.warning("stopping %r at exit failed: %s", cluster, e)
