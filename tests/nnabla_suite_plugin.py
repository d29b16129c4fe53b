"""pytest plugin that runs nnabla's own unit tests on dpnb (loaded by ``nnabla_suite.py``).

Loaded with ``-p``, it makes ``nnabla`` names resolve to dpnb before pytest imports any
conftest or test module, keeps only the node ids listed in ``--dpnb-select``, and writes
each test's outcome, with the first line of its error, as a JSON line to
``--dpnb-outcomes``.  It changes no test; its shims give the private helpers of nnabla's
that tests import to build their references (``nnabla_private``) and, with
``--dpnb-communicator`` (each rank of an ``mpiexec`` run), the CPU context in place of
CUDA's in the communicator tests' ``comm_nccl_opts`` fixture (``cpu_comm_opts``)."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import dpnb
import nnabla_private

dpnb.use_as_nnabla()


nnabla_private.install()


def pytest_addoption(parser):
    group = parser.getgroup("dpnb", "nnabla's suite on dpnb")
    group.addoption("--dpnb-select", help="file with one node id per line to run (default: "
                                          "every test collected)")
    group.addoption("--dpnb-outcomes", required=True, help="JSON-lines file of outcomes to write")
    group.addoption("--dpnb-communicator", action="store_true",
                    help="run as one rank of an mpiexec run: nnabla's comm_nccl_opts fixture "
                         "gets dpnb's CPU context and an MPI communicator; rank r writes its "
                         "outcomes to OUTCOMES.rank<r>, a 'collected' line first per test")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--dpnb-select") is None:
        return
    wanted = set(Path(config.getoption("--dpnb-select")).read_text().split("\n")) - {""}
    selected = [item for item in items if item.nodeid in wanted]
    config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in wanted])
    items[:] = selected


def _reason(report) -> str:
    """The error's first line (``AttributeError: ...``), or the skip's reason."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        text = crash.message
    elif isinstance(report.longrepr, tuple):  # a skip: (file, line, reason)
        text = report.longrepr[2]
    else:
        text = str(report.longrepr or "")
    return text.strip().split("\n")[0][:300]


def _collect_reason(report) -> str:
    """The last line of a collection error's text: the exception that stopped the import."""
    lines = [line for line in str(report.longrepr).splitlines() if line.startswith("E ")]
    return (lines[-1][1:].strip() if lines else str(report.longrepr).strip()[-300:])[:300]


def _world_rank() -> int:
    """This process's rank in the mpiexec run (the communicator's world rank too)."""
    from mpi4py import MPI

    return MPI.COMM_WORLD.Get_rank()


def cpu_comm_opts(type_config: str, gpus: str | None) -> SimpleNamespace:
    """What communicator/conftest.py's ``comm_nccl_opts`` gives on GPUs (``comm``,
    ``ctx``, ``device_id``, ``devices``, ``mpi_rank``, ``mpi_local_rank``), on dpnb's CPU
    context: an initialised ``MultiProcessDataParallelCommunicator``, each rank its own
    device (``devices`` lists one per rank, this rank's is its local rank)."""
    import nnabla.communicators as C
    from nnabla.ext_utils import get_extension_context

    if gpus is not None:
        raise ValueError(f"--communicator-gpus={gpus} chooses CUDA devices; the CPU run has one "
                         "device per rank: leave it out")
    ctx = get_extension_context("cpu", type_config=type_config)
    comm = C.MultiProcessDataParallelCommunicator(ctx)
    comm.init()
    devices = [str(rank) for rank in range(comm.size)]
    ctx.device_id = devices[comm.local_rank]
    return SimpleNamespace(comm=comm, ctx=ctx, device_id=ctx.device_id, devices=devices,
                           mpi_rank=comm.rank, mpi_local_rank=comm.local_rank)


class OutcomeWriter:
    """Appends one JSON line per test (its call's outcome, or its setup's or teardown's
    where that failed) and per file that could not be collected; with ``collected``, a
    line per test selected first (outcome "collected"), for a run with no list of its own."""

    def __init__(self, path: str, collected: bool = False):
        self.path = path
        self.collected = collected

    def pytest_collection_finish(self, session):
        if self.collected:
            for item in session.items:
                self.write({"nodeid": item.nodeid, "outcome": "collected", "when": "collect",
                            "reason": ""})

    def pytest_runtest_logreport(self, report):
        failed_around = report.when in ("setup", "teardown") and not report.passed
        if report.when != "call" and not failed_around:
            return
        outcome = "error" if failed_around and report.failed else report.outcome
        record = {"nodeid": report.nodeid, "outcome": outcome, "when": report.when,
                  "reason": "" if report.passed else _reason(report)}
        self.write(record)

    def pytest_collectreport(self, report):
        """A file that fails to import: one line for it, which its tests inherit."""
        if report.failed:
            self.write({"nodeid": report.nodeid, "outcome": "error", "when": "collect",
                        "reason": _collect_reason(report)})

    def write(self, record: dict) -> None:
        with open(self.path, "a") as out:
            out.write(json.dumps(record) + "\n")


def pytest_configure(config):
    path = config.getoption("--dpnb-outcomes")
    communicator = config.getoption("--dpnb-communicator")
    if communicator:
        path = f"{path}.rank{_world_rank()}"
    config.pluginmanager.register(OutcomeWriter(path, collected=communicator))


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef, request):
    """With ``--dpnb-communicator`` and the suite's ``--test-communicator``: the value of
    ``comm_nccl_opts`` (communicator/conftest.py, which asks for CUDA) on the CPU context,
    set up once per session as the conftest's own; otherwise pytest's own setup."""
    config = request.config
    if (fixturedef.argname != "comm_nccl_opts" or not config.getoption("--dpnb-communicator")
            or not config.getoption("--test-communicator", False)):
        return None
    key = fixturedef.cache_key(request)
    try:
        value = cpu_comm_opts(config.getoption("--type-config", "float"),
                              config.getoption("--communicator-gpus", None))
    except Exception as e:
        fixturedef.cached_result = (None, key, (e, e.__traceback__))
        raise
    fixturedef.cached_result = (value, key, None)
    return value
