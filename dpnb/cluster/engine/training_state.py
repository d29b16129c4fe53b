"""Training state that outlives its engines: ``state = dpnb.TrainingState(solver=solver,
step=0)`` on every rank, ``state.commit()`` every few steps, and after an engine dies
``cluster.restart(resume=True)`` brings the last commit back.

A commit holds, per rank, every parameter of the current scope (trainable or not,
e.g. batch-normalisation statistics), each solver's states, step counts and
learning rate, the counters, and the states of the random generators a training
loop draws from: dpnb's (``dpnb.random.prng``: initialisers, dropout, ``F.rand``
and the other samplers with ``seed=-1``), NumPy's global one (``np.random.*``),
Python's ``random`` module, and those passed as ``rngs={"name": generator}``.
Generators kept elsewhere (a function's own ``seed=``, a data iterator's shuffling
generator unless passed in ``rngs``, CuPy's) are not captured.

Commits are two-phase across ranks, in ``$DPNB_STATE_DIR`` or else
``dpnb-state-<cluster id>`` in the cluster's IPython profile (on several hosts a path
they all see, such as a shared home, or the same path on each): every rank writes
``commit-N.rank-R.npz`` atomically, the ranks confirm to each other that all writes
succeeded, then rank 0 writes ``commit-N.complete``.
A commit is restored only where its marker and every rank's file exist, so a crash
between the two phases restores commit N - 1, which is kept until N is complete.

On engines restarted with ``resume=True`` the notebook calls ``prepare_resume``
before it replays the journal and ``finish_resume`` after it: the state
constructed during the replay (or else the first one constructed afterwards)
takes the last complete commit.  Elsewhere (a script run again under mpiexec, a
new cluster on the same ``$DPNB_STATE_DIR``) ``TrainingState(..., resume=True)``
takes it.  Any other construction starts a new run and removes the earlier run's
commits, saying which first (a warning on rank 0's log).  Construction and
``commit()`` are collective: run them on every rank."""
from __future__ import annotations

import json
import logging
import math
import os
import random
import re
import time
from collections.abc import Mapping

import numpy as np

from ...communicators import values
from ...errors import DpnbError
from ...formats.files import atomic_write, load_arrays, sweep_temporaries

log = logging.getLogger(__name__)

STATE_ENV = "DPNB_STATE_DIR"
COMMIT_KEY = "dpnb_commit"  # what a commit publishes to the notebook (a training cell)
_FILE = re.compile(r"commit-(\d+)\.rank-(\d+)\.npz")
_MARKER = re.compile(r"commit-(\d+)\.complete")

_resume: str | None = None  # None, "replaying" or "on_construction"
_latest: TrainingState | None = None
_comm = None


def state_directory(environ=os.environ) -> str | None:
    """``$DPNB_STATE_DIR``, else ``dpnb-state-<cluster id>`` in the IPython profile of the
    cluster (ipyparallel gives its engines both), else None."""
    if environ.get(STATE_ENV):
        return environ[STATE_ENV]
    if environ.get("IPP_PROFILE_DIR"):
        name = f"dpnb-state-{environ.get('IPP_CLUSTER_ID') or 'default'}"
        return os.path.join(environ["IPP_PROFILE_DIR"], name)
    return None


def _rank_file(directory: str, commit: int, rank: int) -> str:
    return os.path.join(directory, f"commit-{commit:06d}.rank-{rank}.npz")


def _marker_file(directory: str, commit: int) -> str:
    return os.path.join(directory, f"commit-{commit:06d}.complete")


def _found(directory: str, pattern: re.Pattern, rank: int | None = None) -> set[int]:
    """Commit numbers of the rank files of ``rank`` (or of the markers) in ``directory``."""
    numbers = set()
    for name in os.listdir(directory):
        match = pattern.fullmatch(name)
        if match and (rank is None or int(match.group(2)) == rank):
            numbers.add(int(match.group(1)))
    return numbers


def _generator_state(generator) -> object:
    """A generator's state as JSON-able data (NumPy RandomState, Generator, random.Random)."""
    if isinstance(generator, np.random.RandomState):
        kind, keys, pos, has_gauss, gauss = generator.get_state()
        return [kind, keys.tolist(), int(pos), int(has_gauss), float(gauss)]
    if isinstance(generator, np.random.Generator):
        return _jsonable(generator.bit_generator.state)
    if isinstance(generator, random.Random):
        version, internal, gauss = generator.getstate()
        return [version, list(internal), gauss]
    raise DpnbError(f"rngs holds a {type(generator).__name__}; TrainingState keeps the state of "
                    "numpy.random.RandomState, numpy.random.Generator and random.Random objects")


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return {"__array__": value.tolist(), "dtype": str(value.dtype)}
    return value.item() if isinstance(value, np.generic) else value


def _from_json(value):
    if isinstance(value, dict):
        if "__array__" in value:
            return np.asarray(value["__array__"], dtype=value["dtype"])
        return {k: _from_json(v) for k, v in value.items()}
    return value


def _set_generator_state(generator, state) -> None:
    if isinstance(generator, np.random.RandomState):
        kind, keys, pos, has_gauss, gauss = state
        generator.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    elif isinstance(generator, np.random.Generator):
        generator.bit_generator.state = _from_json(state)
    else:
        version, internal, gauss = state
        generator.setstate((version, tuple(internal), gauss))


def _world():
    """A duplicate of MPI's world (made once, collectively), so commits never match the
    training's own messages."""
    global _comm
    if _comm is None:
        from mpi4py import MPI

        _comm = MPI.COMM_WORLD.Dup()
    return _comm


class TrainingState:
    """Counters, parameters, solver states and random states of a training run, committed
    to disk with ``commit()`` and restored on engines restarted with ``resume=True``.

    ``solver`` is a solver or a dict name -> solver; ``rngs`` a dict name -> generator
    of your own to keep as well; the other keywords are counters (JSON values: ints,
    floats, strings, lists), read and set as attributes (``state.step += 1``).
    ``directory`` defaults to the cluster's (``state_directory()``).

    ``resume=True`` continues from the newest complete commit in the directory (see
    ``restored``; the counters given stand where there is none).  Without it, outside
    ``cluster.restart(resume=True)``, the state starts a new run: the commits found
    there are removed, after a warning that names them."""

    def __init__(self, solver=None, *, rngs: Mapping | None = None,
                 directory: str | os.PathLike | None = None, resume: bool = False,
                 **counters):
        global _resume, _latest
        self._solvers = self._checked_solvers(solver)
        self._rngs = dict(rngs or {})
        for generator in self._rngs.values():
            _generator_state(generator)  # refuse what cannot be kept now, not at commit
        self._directory = self._checked_directory(directory)
        clashes = [name for name in counters if name.startswith("_") or hasattr(TrainingState, name)
                   or name in ("committed", "restored", "commit_seconds")]
        if clashes:
            raise DpnbError(f"TrainingState counters {clashes} would hide its own attributes; "
                            "choose other names (e.g. n_commits)")
        self._counters = list(counters)
        _json_counters(counters)
        for name, value in counters.items():
            setattr(self, name, value)
        self._world = _world()
        self._next: int | None = None
        self.committed: int | None = None
        self.restored: int | None = None
        self.commit_seconds: float | None = None
        _latest = self
        if _resume == "on_construction" or (resume and _resume is None):
            self.restore()  # where it raises, a corrected construction tries again
            _resume = None
        elif _resume is None:
            self._forget_earlier_commits()

    @staticmethod
    def _checked_solvers(solver) -> dict:
        from ...solvers import Solver

        solvers = {} if solver is None else solver if isinstance(solver, Mapping) else {
            "solver": solver}
        wrong = {k: type(s).__name__ for k, s in solvers.items() if not isinstance(s, Solver)}
        if wrong:
            raise DpnbError(f"TrainingState's solver must be a solver (e.g. S.Adam()) or a dict "
                            f"name -> solver, got {wrong}")
        return dict(solvers)

    @staticmethod
    def _checked_directory(directory) -> str:
        directory = state_directory() if directory is None else os.fspath(directory)
        if not directory:
            raise DpnbError(f"TrainingState has no directory: neither ${STATE_ENV} nor "
                            "ipyparallel's $IPP_PROFILE_DIR is set (this is not a cluster "
                            "engine); pass directory='/a/path/every/rank/can/write'")
        os.makedirs(directory, exist_ok=True)
        return directory

    @property
    def rank(self) -> int:
        return self._world.Get_rank()

    @property
    def directory(self) -> str:
        return self._directory

    @property
    def counters(self) -> dict:
        """The counters' current values, by name."""
        return {name: getattr(self, name) for name in self._counters}

    def __repr__(self) -> str:
        counters = ", ".join(f"{k}={v!r}" for k, v in self.counters.items())
        return f"TrainingState({counters}; last commit {self.committed})"

    # -- committing -------------------------------------------------------------------

    def _arrays(self) -> dict[str, np.ndarray]:
        """Everything a commit holds on this rank, as named host arrays (metadata as JSON)."""
        from ... import random as dpnb_random
        from ...context import to_module
        from ...parameter import get_parameters

        arrays, meta = {}, {"counters": self.counters, "solvers": {}, "rngs": {}}
        params = get_parameters(grad_only=False)
        meta["parameters"] = list(params)
        for name, v in params.items():
            arrays[f"param/{name}"] = to_module(v.d, np)
        for key, solver in self._solvers.items():
            states = solver.get_states()
            meta["solvers"][key] = {"type": solver.name, "lr": solver.learning_rate(),
                                    "t": {name: int(s.t) for name, s in states.items()}}
            for name, s in states.items():
                for entry, value in s.pstate.items():
                    arrays[f"solver/{key}/{name}/{entry}"] = value.d
        kind, keys, pos, has_gauss, gauss = np.random.get_state()
        version, internal, python_gauss = random.getstate()
        meta["rngs"] = {"dpnb": _generator_state(dpnb_random.prng),
                        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(gauss)],
                        "python": [version, list(internal), python_gauss]}
        meta["own_rngs"] = {k: _generator_state(g) for k, g in self._rngs.items()}
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        return arrays

    def commit(self) -> int:
        """Write this state as the next commit on every rank (collective); its number."""
        world = self._world
        if self._next is None:
            own = _found(self._directory, _FILE, self.rank) | _found(self._directory, _MARKER)
            self._next = max(values.allgather_json(world, max(own, default=0))) + 1
        number = self._next
        _json_counters(self.counters)
        started = time.perf_counter()
        try:
            arrays = self._arrays()
            with atomic_write(_rank_file(self._directory, number, self.rank)) as f:
                np.savez(f, **arrays)
            failure = None
        except Exception as e:  # noqa: BLE001 - every rank must learn of it, or the others wait
            failure = f"{type(e).__name__}: {e}"
        failures = [(r, f) for r, f in enumerate(values.allgather_json(world, failure))
                    if f is not None]
        if failures:
            raise DpnbError(f"commit {number} failed (nothing was committed; the last complete "
                            f"commit is {self.committed}): " + "; ".join(
                                f"rank {r}: {f}" for r, f in failures))
        marker_failure = None
        if self.rank == 0:
            try:
                with atomic_write(_marker_file(self._directory, number)) as f:
                    f.write(json.dumps({"commit": number, "size": world.Get_size(),
                                        "counters": self.counters}).encode())
            except Exception as e:  # noqa: BLE001 - the other ranks must learn of it
                marker_failure = f"{type(e).__name__}: {e}"
        marker_failure = values.bcast_json(world, marker_failure, root=0)
        if marker_failure is not None:
            raise DpnbError(f"commit {number} failed: rank 0 could not mark it complete "
                            f"({marker_failure}); the last complete commit is {self.committed}")
        self._next = number + 1
        self.committed = number
        self._prune(keep_from=number)
        self.commit_seconds = time.perf_counter() - started
        _tell_notebook(number, self.counters)
        return number

    def _prune(self, keep_from: float) -> None:
        """Remove this rank's files (rank 0: markers) of commits before ``keep_from``, and
        temporary files a killed write left."""
        for number in _found(self._directory, _FILE, self.rank):
            if number < keep_from:
                _remove(_rank_file(self._directory, number, self.rank))
        if self.rank == 0:
            for number in _found(self._directory, _MARKER):
                if number < keep_from:
                    _remove(_marker_file(self._directory, number))
        sweep_temporaries(self._directory,
                          re.compile(rf"\.commit-\d+\.rank-{self.rank}\.npz\.[^.]+\.tmp"))

    def _forget_earlier_commits(self) -> None:
        """A new training run: commits of an earlier one must never be restored into it.
        Each rank removes its own files, so no earlier commit stays complete; rank 0
        names them first."""
        if self.rank == 0:
            found = _found(self._directory, _FILE, 0) | _found(self._directory, _MARKER)
            if found:
                log.warning(_forgetting_message(self._directory, found))
        self._prune(keep_from=math.inf)

    # -- restoring --------------------------------------------------------------------

    def last_complete(self) -> dict | None:
        """The marker of the newest commit complete on every rank (collective), or None."""
        world = self._world
        own = _found(self._directory, _FILE, self.rank)
        markers = [[n, _read_marker(self._directory, n)]
                   for n in _found(self._directory, _MARKER)]
        gathered = values.allgather_json(world, sorted(own))
        markers = dict(values.bcast_json(world, markers, root=0))  # JSON: pairs, as keys are ints
        usable = [n for n, m in markers.items()
                  if m is not None and m["size"] == world.Get_size()
                  and all(n in files for files in gathered)]
        if not usable and any(m is not None and m["size"] != world.Get_size()
                              for m in markers.values()):
            raise DpnbError(f"the commits in {self._directory} were made by a different number "
                            f"of ranks than the {world.Get_size()} running now; restart with as "
                            "many engines as made them")
        return markers[max(usable)] if usable else None

    def restore(self) -> int | None:
        """Load the newest complete commit into the parameters, solvers, generators and
        counters (collective); its number, or None where there is none."""
        marker = self.last_complete()
        if marker is None:
            return None
        number = marker["commit"]
        arrays = load_arrays(_rank_file(self._directory, number, self.rank), "training state")
        self._load(arrays, number)
        self.restored = self.committed = number
        self._next = number + 1
        return number

    def _load(self, arrays: dict, number: int) -> None:
        from ... import random as dpnb_random
        from ...graph import Variable
        from ...parameter import get_parameters
        from ...solvers import SolverState

        meta = json.loads(arrays["meta"].tobytes())
        params = get_parameters(grad_only=False)
        if list(params) != meta["parameters"] or any(
                params[n].shape != arrays[f"param/{n}"].shape for n in params):
            raise DpnbError(f"commit {number} does not fit the network: it holds parameters "
                            f"{_shapes(meta['parameters'], arrays)}, the network has "
                            f"{[(n, v.shape) for n, v in params.items()]}; build the same "
                            "network (the journal's cells) before the TrainingState")
        if sorted(meta["solvers"]) != sorted(self._solvers):
            raise DpnbError(f"commit {number} holds solvers {sorted(meta['solvers'])}, this "
                            f"TrainingState has {sorted(self._solvers)}; pass the same solver= ")
        missing = sorted(set(meta["own_rngs"]) ^ set(self._rngs))
        if missing:
            raise DpnbError(f"commit {number} holds generators {sorted(meta['own_rngs'])}, this "
                            f"TrainingState has {sorted(self._rngs)}; pass the same rngs=")
        for name, v in params.items():
            v.d = arrays[f"param/{name}"]
        for key, solver in self._solvers.items():
            saved = meta["solvers"][key]
            if saved["type"] != solver.name:
                raise DpnbError(f"commit {number} holds a {saved['type']} solver as {key!r}, "
                                f"not this {solver.name}")
            states = {}
            for name, t in saved["t"].items():
                state = SolverState()
                prefix = f"solver/{key}/{name}/"
                state.pstate = {k[len(prefix):]: Variable.from_numpy_array(a)
                                for k, a in arrays.items() if k.startswith(prefix)}
                state.t = t
                states[name] = state
            solver.set_states(states)
            solver.set_learning_rate(saved["lr"])
        _set_generator_state(dpnb_random.prng, meta["rngs"]["dpnb"])
        kind, keys, pos, has_gauss, gauss = meta["rngs"]["numpy"]
        np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
        version, internal, gauss = meta["rngs"]["python"]
        random.setstate((version, tuple(internal), gauss))
        for key, generator in self._rngs.items():
            _set_generator_state(generator, meta["own_rngs"][key])
        for name in self._counters:
            if name in meta["counters"]:
                setattr(self, name, meta["counters"][name])


def _json_counters(counters: dict) -> None:
    try:
        json.dumps(counters)
    except (TypeError, ValueError) as e:
        raise DpnbError(f"TrainingState counters must be JSON values (ints, floats, strings, "
                        f"lists, dicts), got {counters!r} ({e}); convert them, e.g. "
                        "int(step)") from None


def _forgetting_message(directory: str, numbers: set[int]) -> str:
    """The warning of a new run that removes the commits ``numbers`` found in ``directory``."""
    markers = (_read_marker(directory, n) for n in sorted(_found(directory, _MARKER),
                                                          reverse=True))
    marker = next((m for m in markers if m is not None), None)
    newest = (f"; the newest complete one, commit {marker['commit']}, holds "
              + ", ".join(f"{k}={v!r}" for k, v in marker["counters"].items())
              if marker else "; none of them is complete")
    return (f"TrainingState: a new run removes the commits of an earlier run in {directory}: "
            f"{', '.join(str(n) for n in sorted(numbers))}{newest}.  To continue from an "
            "earlier run's last commit instead, construct the state with resume=True "
            "(after an engine died: cluster.restart(resume=True)); to keep them, give the "
            "new run another directory= (or $DPNB_STATE_DIR)")


def _read_marker(directory: str, number: int) -> dict | None:
    """The marker of commit ``number``, or None where it cannot be read or lacks what
    rank 0 writes into every marker."""
    try:
        with open(_marker_file(directory, number), "rb") as f:
            marker = json.loads(f.read())
    except (OSError, ValueError):
        return None
    if (not isinstance(marker, dict) or not {"commit", "size", "counters"} <= marker.keys()
            or not isinstance(marker["counters"], dict)):
        return None
    return marker


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _shapes(names: list[str], arrays: dict) -> list:
    return [(n, arrays[f"param/{n}"].shape) for n in names if f"param/{n}" in arrays]


def _tell_notebook(number: int, counters: dict) -> None:
    """Mark the running cell as a training cell: a commit's number and counters go to the
    notebook over ipyparallel's data channel (nothing happens outside engines)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    publisher = getattr(get_ipython(), "data_pub", None)
    if publisher is not None:
        publisher.publish_data({COMMIT_KEY: {"commit": number, "counters": counters}})


def prepare_resume() -> None:
    """On a fresh engine before the journal's replay: states constructed now wait for
    ``finish_resume`` instead of forgetting the earlier commits."""
    global _resume, _latest
    _resume, _latest = "replaying", None


def finish_resume() -> dict:
    """After the replay (collective): restore the last commit into the state the replay
    constructed, or leave it to the next construction; what was (or will be) restored."""
    global _resume
    _resume = "on_construction"  # also where the restore below raises
    if _latest is not None:
        number = _latest.restore()
        _resume = None
        return {"restored": number, "counters": _latest.counters if number else None}
    directory = state_directory()
    markers = sorted(_found(directory, _MARKER)) if directory and os.path.isdir(directory) else []
    marker = _read_marker(directory, markers[-1]) if markers else None
    return {"restored": None, "pending": marker["commit"] if marker else None,
            "counters": marker["counters"] if marker else None}
