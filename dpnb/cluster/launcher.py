"""Start, inspect, restart and stop a cluster of MPI engines (``dpnb.start``).

A thin layer over ``ipyparallel.Cluster(engines="mpi")``: engines run
``python -m dpnb.cluster.engine`` so engine ids equal MPI ranks, the view is ordered
by rank and blocking, start and stop print nothing, and every process the
cluster started is gone after ``stop()``, even where a polite shutdown fails."""
from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Sequence

from ..errors import DpnbError
from ..notebook.table import Table
from . import cells, files, processes, registry
from .checks import check_engines, check_listening, require_mpi
from .engine import calls
from .engine.training_state import STATE_ENV, state_directory
from .journal import Journal
from .owned import OwnedProcesses
from .profile import CONTROLLER_LAUNCHER, ENGINE_CMD, ENGINE_LAUNCHER
from .resume import resume_session
from .view import GONE_ENGINES, Guard, GuardedClient, UnansweredTasks

log = logging.getLogger(__name__)

START_TRIES = 2      # starts of an engine set whose MPI job exits before any engine registers


def default_n() -> int:
    """One engine per GPU, or per CPU core where there is no GPU."""
    from ..context import default_extension

    if default_extension() == "cudnn":
        import cupy
        return cupy.cuda.runtime.getDeviceCount()
    return os.cpu_count() or 1


class Cluster:
    """MPI-mode IPython-parallel engines, one per rank, driven from this process.

    Made by ``dpnb.start`` (which also starts it), or made here and started with
    ``start()`` or a ``with`` block.  Engine ids equal MPI ranks; ``view`` is a
    blocking DirectView over them in rank order, which ``%%px`` uses.

    Parameters
    ----------
    n : int, optional
        Engines (MPI ranks) to start.  Default: one per GPU, else one per CPU core.
    engines : {"mpi", "slurm"}
        ``"mpi"`` starts them under mpiexec; ``"slurm"`` submits them as one Slurm
        job of ``n`` tasks (``srun --mpi=pmi2``, see ``dpnb.cluster.slurm``, with
        sbatch's options as ``SBATCH_*`` variables in ``env``).  No other launcher
        is accepted.
    mpi_args : sequence of str
        Extra mpiexec arguments, e.g. ``["-f", "hostfile"]`` for several hosts.
    env : dict of str to str, optional
        Variables set in the engines' environment (e.g. ``DPNB_COMM_TIMEOUT``,
        ``DPNB_STATE_DIR``).
    timeout : float
        Seconds to wait for the controller and for every engine to register
        (default 60); past it the start fails with the end of the engine log.
    ip : str, optional
        The address the controller listens on; default 127.0.0.1.  ``"*"`` means
        every interface; anything beyond 127.0.0.1 needs ``curve`` or ``insecure``.
    location : str, optional
        This host's name as the engines reach it (written into the connection file).
    curve : bool
        Encrypt and authenticate with ipyparallel's CurveZMQ.
    insecure : bool
        Allow an ``ip`` beyond 127.0.0.1 without ``curve``, on a network you trust.
    profile, profile_dir : str, optional
        The IPython profile (by name, or its directory) whose files the cluster
        uses; one cluster runs per profile and cluster id.
    progress : bool
        Show the progress bar and live loss curve that ``dpnb.notebook.report``
        feeds, in the cell that runs the loop.
    stop_at_exit : bool
        End the cluster with this process, even when it is killed (a watchdog
        child does it); False leaves it running, as ``dpnb cluster start`` does.
    **ipp_options
        Passed on to ``ipyparallel.Cluster`` (e.g. ``cluster_id``,
        ``controller_args``).

    Raises
    ------
    DpnbError
        For ``n`` below 1, an unknown ``engines``, or an ``ip`` beyond loopback
        without ``curve`` or ``insecure``.

    Examples
    --------
    >>> with dpnb.Cluster(n=2) as cluster:            # doctest: +SKIP
    ...     cluster.view.apply_sync(lambda: 1)
    [1, 1]
    """

    def __init__(self, n: int | None = None, *, engines: str = "mpi",
                 mpi_args: Sequence[str] = (), env: dict[str, str] | None = None,
                 timeout: float = 60.0, ip: str | None = None, location: str | None = None,
                 curve: bool = False, insecure: bool = False, profile: str | None = None,
                 profile_dir: str | None = None, progress: bool = True,
                 stop_at_exit: bool = True, **ipp_options):
        self.n = int(n) if n is not None else default_n()
        if self.n < 1:
            raise DpnbError(f"a cluster needs at least one engine, got n={self.n}")
        check_engines(engines, mpi_args)
        check_listening(ip, curve, insecure)
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
        self._owned: OwnedProcesses | None = None   # its processes, record and watchdog
        self._monitor = None
        self._guard: Guard | None = None   # what stands between %%px and a cluster that is gone
        self._unanswered = UnansweredTasks(self._controller_gone)
        self.journal = Journal()

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
            launcher = ENGINE_LAUNCHER
        else:
            from .slurm import SlurmEngines
            launcher = SlurmEngines
        options = dict(engines=launcher, n=self.n, config=config, log=files.IPP_LOG,
                       controller=CONTROLLER_LAUNCHER,
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
        """Start the controller and ``n`` engines; return when all are ready.

        Returns
        -------
        Cluster
            This cluster, now running and current (``%%px``, ``dpnb.gather``).

        Raises
        ------
        DpnbError
            When it already runs, when another cluster runs on the same profile and
            cluster id, or when the controller or engines do not come within
            ``timeout`` (with the end of their log); what was started is stopped.
        """
        if self.ipp is not None:
            raise DpnbError("this cluster is already running; call stop() or restart() first")
        self.ipp = self._make_ipp_cluster()
        self._owned = OwnedProcesses(self.ipp.profile_dir, self.ipp.cluster_id)
        try:
            self._owned.claim(self.n)
        except BaseException:
            self.ipp = self._owned = None
            raise
        registry.starting(self)
        try:
            if self.stop_at_exit:
                self._owned.start_watchdog()
            self.ipp.start_controller_sync()
            self._remember_processes()
            self.client = self._connect_client(self.timeout)
            self._start_engines()
        except BaseException:
            self.stop()
            raise
        registry.make_current(self)
        return self

    def _connect_client(self, timeout: float) -> GuardedClient:
        """A client of the controller within ``timeout`` (a controller still starting
        writes its connection file meanwhile), or a DpnbError with the controller's log."""
        controller = self.ipp.controller
        deadline = time.monotonic() + timeout
        while True:
            try:
                return GuardedClient(controller.connection_files["client"],
                                     profile_dir=self.ipp.profile_dir,
                                     cluster_id=self.ipp.cluster_id,
                                     timeout=max(deadline - time.monotonic(), 1.0))
            except TimeoutError as e:   # the controller does not answer
                error = e
                break
            except (OSError, ValueError) as e:   # its file not written yet, or half written
                error = e
            if time.monotonic() > deadline or not self._controller_alive():
                break
            time.sleep(0.1)
        log_text = controller.get_output()
        profile_dir, cluster_id = self.ipp.profile_dir, self.ipp.cluster_id
        raise DpnbError(f"the controller (pid {getattr(controller, 'pid', '?')}) of the "
                        f"cluster in {files.place(profile_dir, cluster_id)} did not answer "
                        f"({error}); if it hangs, {files.stop_hint(profile_dir, cluster_id)} "
                        "ends the cluster.\nThe end of its log:\n"
                        + "".join(log_text.splitlines(True)[-10:])) from None

    def _start_engines(self) -> None:
        """Start one engine set and wait for it; on failure raise with the end of its log.

        An MPI job that exits before any engine registers is started once more: MPICH's
        UCX now and then fails ``MPI_Init`` for no lasting reason (pmodels/mpich#7417).
        That retry is logged at INFO: it leaves nothing to do, and a warning would land in
        a notebook cell's output (changing what nbval compares); a second failure raises
        with the log."""
        from ipyparallel.error import EngineError

        for tries_left in reversed(range(START_TRIES)):
            self.ipp.start_engines_sync(self.n)
            self._remember_processes()
            try:
                self._wait_for_engines(self.timeout)
                break
            except EngineError as e:
                if tries_left and not self.client.ids:
                    log.info("the engines' MPI job exited before any engine registered; "
                             "starting it once more.  The end of its log:\n%s", self.log_tail())
                    self.ipp.stop_engines_sync()
                    continue
                error = e
            except TimeoutError as e:
                error = e
            raise DpnbError(f"{self.n} engines did not start within {self.timeout:g} s "
                            f"({error}); the end of the engine log:\n{self.log_tail()}") from None
        ids = sorted(self.client.ids)
        if ids != list(range(self.n)):
            raise DpnbError(f"engine ids {ids} do not equal the MPI ranks 0..{self.n - 1}; "
                            "were engines of another cluster registered? call restart()")
        self._remember_processes()
        self._open_view(ids)

    def _wait_for_engines(self, timeout: float) -> None:
        """Wait until ``n`` engines are registered; TimeoutError after ``timeout``, EngineError
        where a local engine launcher (mpiexec) exits first."""
        from ipyparallel.error import EngineError

        waiting = self.client.wait_for_engines(self.n, timeout=timeout, block=False,
                                               interactive=False)
        deadline = time.monotonic() + timeout + 5
        # the client's own wait may miss registrations after a failed start: ask it too
        while not waiting.done() and len(self.client.ids) < self.n:
            if self._engines_exited():
                raise EngineError("the engine launcher (mpiexec, or the Slurm job) exited")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no answer from wait_for_engines in {timeout:g} s")
            time.sleep(0.1)
        if waiting.done():
            waiting.result()

    def _open_view(self, ids: list[int], activate: bool = True) -> None:
        """The blocking, rank-ordered view; with ``activate``, ``%%px`` and the progress
        display where IPython runs."""
        shell = _ipython() if activate else None
        if shell is not None and self.progress and self._monitor is None:
            from ..notebook.progress import ProgressMonitor

            self._monitor = ProgressMonitor()
            self._monitor.start()
        watchers = [self._unanswered.watch] + ([self._monitor.watch] if self._monitor else [])
        self._guard = Guard(self._gone, GONE_ENGINES, watchers)
        self.view = self.client.guarded_view(ids, self._guard)
        if shell is None:
            return
        self.view.activate()
        registry.activated(self.view)
        cells.life(shell).follow(self.journal, self._monitor, self._guard)

    def _controller_gone(self) -> str | None:
        """Why this cluster has no controller (stopped, or its process ended), or None."""
        ipp = self.ipp
        if ipp is None:
            return _STOPPED
        if self._controller_alive():
            return None
        where = files.place(ipp.profile_dir, ipp.cluster_id)
        pid = getattr(ipp.controller, "pid", "?")
        gone = f"the controller (pid {pid}) of the cluster in {where}"
        still = self._owned.still_running()
        if still:
            return (f"{gone} is gone, but the rest of the cluster still runs ({still}): its "
                    "controller was ended from outside.  `cluster.restart()` (or `%dpnb "
                    "restart`) ends them and starts a new controller and engines (the engines' "
                    "variables are lost); `cluster.stop()` only ends them")
        return (f"{gone} is gone, and its engines with it: the cluster was stopped from "
                "outside (the IPython Clusters panel, `dpnb cluster stop`) or its processes "
                "were ended.  `cluster.restart()` (or `%dpnb restart`) starts a new controller "
                "and engines (the engines' variables are lost); "
                f"{files.attach_hint(ipp.profile_dir, ipp.cluster_id)} uses a cluster started "
                "again elsewhere")

    def _gone(self) -> str | None:
        """Why this cluster cannot run a cell (its controller or engines are gone), or
        None: a few process and notification checks, cheap enough for every cell."""
        why = self._controller_gone()
        if why is not None:
            return why
        if self.client is None or self.view is None:
            return _STOPPED
        registered = set(self.client.ids)
        targets = self.view.targets   # a list, or one id, or "all" (``%%px --targets``)
        wanted = [targets] if isinstance(targets, int) else (
            targets if isinstance(targets, list) else sorted(registered) or [0])
        missing = [t for t in wanted if t not in registered]
        if not missing and not self._engines_exited():
            return None
        where = files.place(self.ipp.profile_dir, self.ipp.cluster_id)
        named = (f"engine{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}"
                 if missing else "the engines")
        are = "is" if len(missing) == 1 else "are"
        still = self._owned.still_running(_ENGINE_ROLES)
        if still:
            return (f"{named} of the cluster in {where} {are} gone from its controller "
                    f"(unregistered), yet engine processes still run ({still}): ending, hung, "
                    f"or cut off from the controller.  {GONE_ENGINES}")
        return (f"{named} of the cluster in {where} {are} gone (died, or stopped from "
                f"outside), and no engine process runs.  {GONE_ENGINES}")

    def _engines_exited(self) -> bool:
        """Whether a local engine launcher process (mpiexec) has exited, or a Slurm
        engine job has ended."""
        import psutil

        for es in self.ipp.engines.values():
            if callable(getattr(es, "ended", None)) and es.ended():
                return True
            process = getattr(es, "process", None)
            try:
                if process is not None and process.status() == psutil.STATUS_ZOMBIE:
                    return True
            except psutil.NoSuchProcess:
                return True
        return False

    def _remember_processes(self) -> None:
        """Record the controller's and engines' processes (the controller's forked
        schedulers too), here and in the profile, so that stop() here or
        ``dpnb cluster stop`` elsewhere can make sure they are gone."""
        self._owned.remember([getattr(self.ipp.controller, "pid", None),
                              *(getattr(es, "pid", None) for es in self.ipp.engines.values())])

    @classmethod
    def attach(cls, profile: str | None = "mpi", cluster_id: str = "", timeout: float = 60.0,
               *, profile_dir: str | None = None) -> Cluster:
        """A cluster started by another process (``dpnb cluster start``, ipcluster, the
        IPython Clusters panel), made this process's current cluster (``%%px``, ``dpnb.gather``).

        Waits up to ``timeout`` for a controller that is still starting and for engines
        that are still registering.  Where its engines died it is attached but not
        ``running``: ``restart()`` starts engines, ``stop()`` ends it.

        Parameters
        ----------
        profile : str, optional
            The IPython profile it was started in (default ``"mpi"``).
        cluster_id : str
            Its cluster id, for several clusters in one profile.
        timeout : float
            Seconds to wait for the controller and the engines.
        profile_dir : str, optional
            The profile's directory, instead of ``profile``.

        Returns
        -------
        Cluster
            The attached cluster; it does not end with this process.

        Raises
        ------
        DpnbError
            Where no cluster runs there, its controller is gone, or its engines do
            not register within ``timeout``; the message says what to do.
        """
        self = cls.connect(profile, cluster_id, timeout, profile_dir=profile_dir, wait=True)
        registry.make_current(self)
        return self

    @classmethod
    def connect(cls, profile: str | None, cluster_id: str, timeout: float, *,
                profile_dir: str | None, wait: bool, activate: bool = True) -> Cluster:
        """A cluster started elsewhere, with a client and, where engines are registered, a
        view (``activate``: for ``%%px``); with ``wait``, after up to ``timeout`` for its
        controller to come up and its engines to register.  Not made current (``attach``)."""
        deadline = time.monotonic() + timeout
        where = files.profile_path(profile, profile_dir)
        left = processes.find(where, cluster_id)
        while wait and files.controller_starting(left) and time.monotonic() < deadline:
            time.sleep(0.1)
            left = processes.find(where, cluster_id)
        if left.controller is None:
            if wait and files.controller_starting(left):
                raise DpnbError(f"the controller of the cluster in "
                                f"{files.place(where, cluster_id)} did not come up within "
                                f"{timeout:g} s of attaching; attach "
                                f"again with a longer timeout, or "
                                f"{files.stop_hint(where, cluster_id)} ends the cluster")
            raise DpnbError(files.not_running(left))
        loaded = files.load_cluster_file(where, cluster_id, left, deadline if wait else None)
        record_n = left.record.n if left.record is not None else None
        n = sum(es.n for es in loaded.engines.values()) or loaded.n or record_n
        self = cls(max(n or 1, 1), profile=profile, profile_dir=profile_dir, timeout=timeout,
                   progress=False, stop_at_exit=False)
        self.ipp = loaded
        self._owned = OwnedProcesses(loaded.profile_dir, cluster_id, left.record, left.processes)
        self.client = self._connect_client(max(deadline - time.monotonic(), 1.0))
        if wait and (loaded.engines or files.starter_alive(left.record) or files.engines_due(left)):
            self._await_engines(where, cluster_id, deadline, timeout)
        if self.client.ids:
            self._open_view(sorted(self.client.ids), activate=activate)
        return self

    def _await_engines(self, where, cluster_id: str, deadline: float, timeout: float) -> None:
        """Wait until the ``n`` engines of an attached cluster have registered (or its
        engine launcher exits, or ``deadline`` passes: then a DpnbError that says what to do)."""
        from ipyparallel.error import EngineError

        try:
            self._wait_for_engines(max(deadline - time.monotonic(), 0.0))
        except (TimeoutError, EngineError) as e:
            registered = len(self.client.ids)
            self.client.close()
            hint = files.attach_hint(where, cluster_id).rstrip(")`")
            raise DpnbError(
                f"{registered} of the {self.n} engines of the cluster in "
                f"{files.place(where, cluster_id)} registered within {timeout:g} s of attaching "
                f"({e}).  Engines that are still starting (a fresh cluster's take several "
                f"seconds) come with a longer timeout: {hint}, timeout=120)`; engines that "
                f"failed show why in their log below; {files.stop_hint(where, cluster_id)} ends "
                f"the cluster.\nThe end of the engine log:\n{self.log_tail()}") from None
        if not self.ipp.engines:   # attached while the starter had not started them yet
            self.ipp = files.load_cluster_file(where, cluster_id, processes.find(where, cluster_id))
        self._owned.refresh()

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
        return self._owned.pids if self._owned is not None else []

    def topology(self) -> Table:
        """Rank, engine id, host, pid, local rank and device of every engine.

        Returns
        -------
        Table
            One row per engine, in rank order; shown as HTML in a notebook.
        """
        self._require_running()
        rows = self.view.apply_sync(calls.identity)
        table = [[r["rank"], eid, r["host"], r["pid"], r["local_rank"], r["device"]]
                 for eid, r in zip(self.view.targets, rows)]
        return Table(["rank", "engine id", "host", "pid", "local rank", "device"], table,
                     title=f"{self.n} MPI engines")

    def _require_running(self) -> None:
        if self.view is None:
            raise DpnbError("the cluster is not running; call start() (or restart()) first")

    # -- restarting and stopping --------------------------------------------------------

    def restart(self, resume: bool = False) -> Cluster:
        """Fresh engines (empty namespaces) with the same controller; ids equal ranks again.

        Parameters
        ----------
        resume : bool
            Keep the session: the journal's cells run again on the fresh engines
            (training cells excepted, see ``dpnb.cluster.journal``) and the last
            complete ``TrainingState`` commit is restored.  Without it the journal
            starts afresh.

        Returns
        -------
        Cluster
            This cluster, running again.  A cluster not started yet is started; one
            whose controller is gone gets a new controller too (not with ``resume``).
        """
        if self.ipp is None:
            return self.start()
        if not self._controller_alive():  # stopped from outside: a new controller too
            if resume:
                raise DpnbError("the controller of this cluster is gone, so its session "
                                "cannot be resumed; `cluster.restart()` starts a new, empty "
                                "one")
            self.stop()
            return self.start()
        if resume:
            shell = _ipython()
            magics = shell.magics_manager.registry.get("ParallelMagics") if shell else None
            dropped = self.journal.drop_unfinished()
        else:
            self.journal.clear()
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
        if resume:
            resume_session(self.view, self.journal, dropped, magics, self._monitor, _ipython())
        return self

    @property
    def state_dir(self) -> str:
        """The folder of the engines' ``TrainingState`` commits.

        ``env["DPNB_STATE_DIR"]`` if given, else ``dpnb-state-<cluster id>`` in the
        cluster's profile, which stop() removes.  On several hosts it must be a path
        they all see."""
        if self.ipp is None:
            raise DpnbError("the cluster is not started; start() gives it a state directory")
        return state_directory({**self.env, "IPP_PROFILE_DIR": self.ipp.profile_dir,
                                "IPP_CLUSTER_ID": self.ipp.cluster_id})

    def _stop_engines(self, grace: float = 10.0) -> None:
        """Ask the engines to exit, wait for mpiexec, then let ipyparallel signal what is left.

        Without a live controller the engines get no request, so there is no waiting."""
        import psutil

        self.view = self._guard = None
        if not self._controller_alive():
            grace = 0.0
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

    def _controller_alive(self) -> bool:
        """Whether the controller runs (a controller not started here counts as running)."""
        controller = self.ipp.controller if self.ipp is not None else None
        if controller is None:
            return False
        process = getattr(controller, "process", None)
        return process is None or processes.alive(process)

    def stop(self) -> None:
        """Stop engines and controller; end whatever of the cluster is still alive (the
        controller's schedulers and orphaned engines included) and remove its files.

        Idempotent.  The state directory that ``restart(resume=True)`` reads is
        removed too, unless ``env`` named one (``DPNB_STATE_DIR``)."""
        if self._monitor is not None:
            self._monitor.stop()
            self._monitor = None
        shell = _ipython()
        if shell is not None:
            cells.life(shell).unfollow(self.journal)
        own_state = (None if self.ipp is None or STATE_ENV in self.env
                     or self._owned.superseded() else self.state_dir)
        if self.ipp is not None:
            try:
                self._stop_processes()
            finally:
                self._owned.stop_watchdog()   # after the processes, should this one die meanwhile
                self._owned = None
        self.view = self._guard = None
        if own_state is not None:
            shutil.rmtree(own_state, ignore_errors=True)
        registry.stopped(self)

    def _stop_processes(self) -> None:
        """Engines, client, controller, then whatever of the cluster is left, and its files."""
        if self._owned.superseded():
            self.ipp.cluster_file = ""   # the file is the later start's: leave it alone
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
                self._owned.end()
                self.ipp = None

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


# the processes of a cluster that run its engines (the controller's are the others)
_ENGINE_ROLES = ("mpiexec", "hydra_pmi_proxy", "engine", "nanny")
_STOPPED = "the cluster is stopped; `cluster.start()` (or `dpnb.start(n=...)`) starts one"


def _ipython():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def start(n: int | None = None, **options) -> Cluster:
    """Start ``n`` MPI engines and return the cluster.

    The cluster becomes the one that ``%%px``, ``dpnb.gather`` and the ``%dpnb``
    magics use.  Start and stop print nothing.

    Parameters
    ----------
    n : int, optional
        Engines (MPI ranks).  Default: one per GPU, else one per CPU core.
    **options
        Those of `Cluster`: ``timeout``, ``mpi_args``, ``env``, ``engines``, ``ip``,
        ``location``, ``curve``, ``profile``, ``stop_at_exit`` ...

    Returns
    -------
    Cluster
        The running cluster; ``cluster.stop()`` ends it.

    Raises
    ------
    DpnbError
        While a cluster started or attached by this process runs (one process
        drives one cluster; ``dpnb.current()`` gives it), or when the cluster
        cannot start (see `Cluster.start`).

    Examples
    --------
    >>> cluster = dpnb.start(n=2)     # doctest: +SKIP
    >>> cluster.topology()            # doctest: +SKIP
    >>> cluster.stop()                # doctest: +SKIP
    """
    running = registry.active()
    if running is not None:
        where = files.place(running.ipp.profile_dir, running.ipp.cluster_id)
        raise DpnbError(f"a cluster is already running in this process: {running!r} in {where}. "
                        "Use it (`cluster = dpnb.current()`), give it fresh engines with "
                        "`cluster.restart()`, or call `cluster.stop()` before starting another")
    return Cluster(n, **options).start()
