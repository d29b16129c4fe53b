"""The ``%dpnb`` line magic (``%load_ext dpnb``): start, stop and look at a cluster; and
``%px``/``%%px`` that say how to get a cluster where none runs (``dpnb.cluster.cells``)."""
from __future__ import annotations

import argparse
import shlex

from ..errors import DpnbError

USAGE = """%dpnb start [-n N] [--timeout SECONDS] [--mpi-args "ARGS"]
    start N MPI engines (default: one per GPU, else per CPU core) and activate %%px on them
%dpnb stop       stop the engines and the controller
%dpnb restart    fresh engines with empty namespaces (engine ids equal ranks again)
%dpnb restart --resume
                 fresh engines that run the journal's %%px cells again and take the last
                 TrainingState commit (re-run the training cell to continue from it)
%dpnb journal    the %%px cells a resume runs again (edit them in cluster.journal)
%dpnb status     the running engines: rank, engine id, host, pid, device
%dpnb grads      every parameter's gradient on every rank
%dpnb sync       check that parameters are identical on every rank
%dpnb where [--timeout SECONDS]
                 every rank's Python stack now, even mid-cell (default: 2 s for answers)
%dpnb help       this text"""


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting the kernel."""

    def error(self, message):
        raise DpnbError(f"%dpnb: {message}\n\n{USAGE}")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="%dpnb", add_help=False)
    commands = parser.add_subparsers(dest="command")
    start = commands.add_parser("start", add_help=False)
    start.add_argument("-n", type=int, default=None)
    start.add_argument("--timeout", type=float, default=60.0)
    start.add_argument("--mpi-args", default="")
    where = commands.add_parser("where", add_help=False)
    where.add_argument("--timeout", type=float, default=2.0)
    restart = commands.add_parser("restart", add_help=False)
    restart.add_argument("--resume", action="store_true")
    for name in ("stop", "status", "journal", "grads", "sync", "help"):
        commands.add_parser(name, add_help=False)
    return parser


def dpnb_magic(line: str):
    from ..cluster import launcher, registry
    from . import inspect, stacks

    args = _parser().parse_args(shlex.split(line))
    if args.command in (None, "help"):
        print(USAGE)
        return None
    if args.command == "start":
        if registry.active() is not None:
            raise DpnbError("%dpnb: a cluster is already running; `%dpnb restart` gives fresh "
                            "engines, `%dpnb stop` stops it")
        launcher.start(args.n, timeout=args.timeout, mpi_args=shlex.split(args.mpi_args))
        return None
    if args.command == "stop":
        registry.stop_current()
        return None
    cluster = registry.current()
    if args.command == "restart":
        cluster.restart(resume=args.resume)
        return None
    if args.command == "journal":
        return cluster.journal
    if args.command == "status":
        return cluster.topology()
    if args.command == "grads":
        return inspect.gather_grads(cluster.view)
    if args.command == "where":
        return stacks.where(cluster.view, timeout=args.timeout)
    return inspect.check_sync(cluster.view)


dpnb_magic.__doc__ = USAGE  # what `%dpnb?` shows


def load_ipython_extension(ipython) -> None:
    """Register ``%dpnb`` in this IPython shell, ``%%px`` that says how to start or
    attach a cluster until one is (ipyparallel's ``view.activate()`` replaces it), and
    the shell's cell hooks (``dpnb.cluster.cells``)."""
    from ..cluster import cells

    ipython.register_magic_function(dpnb_magic, magic_kind="line", magic_name="dpnb")
    if ipython.find_cell_magic("px") is None:
        cells.install_placeholder(ipython)
    cells.life(ipython)
