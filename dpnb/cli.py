"""The ``dpnb`` command: ``dpnb run``, ``demo``, ``cluster``, ``profile``, ``doctor``,
``tutorial`` and ``notebooks``.  A DpnbError ends a command with its message on one line of
stderr and exit status 1, a usage mistake with argparse's message and status 2; the cluster
commands' other statuses are in ``EXIT_STATUSES``."""
from __future__ import annotations

import argparse
import logging
import os
import runpy
import shlex
import shutil
import sys
import time
import traceback
from pathlib import Path

import numpy as np


def demo(steps: int, extension: str | None) -> int:
    """Train the tutorial's network in this process and print the loss per step."""
    import dpnb as nn
    import dpnb.solvers as S
    from dpnb.ext_utils import get_extension_context
    from dpnb.initializer import UniformInitializer, calc_uniform_lim_glorot
    from dpnb.models import tutorial_network

    ctx = get_extension_context(extension or nn.default_extension())
    rng = np.random.RandomState(0)
    n_class, shape = 2, (4, 1, 32, 32)
    with nn.context_scope(ctx):
        x, y = nn.Variable(shape), nn.Variable((shape[0], 1))
        x.d = rng.rand(*shape)
        y.d = rng.choice(n_class, shape[0]).reshape(-1, 1)
        w_init = UniformInitializer(calc_uniform_lim_glorot(1, 0.5, kernel=(1, 1)), rng=rng)
        loss = tutorial_network(x, y, n_class, w_init=w_init)
    solver = S.Adam()
    solver.set_parameters(nn.get_parameters())
    print(f"training the tutorial network on {ctx.backend[0]} for {steps} steps")
    print(f"{'step':>5} {'loss':>10} {'ms':>8}")
    for step in range(steps):
        start = time.perf_counter()
        loss.forward()
        solver.zero_grad()
        loss.backward()
        solver.update()
        print(f"{step:5d} {float(loss.d):10.6f} {1e3 * (time.perf_counter() - start):8.2f}")
    return 0


def run_script(script: str, args: list[str]) -> int:
    """Run ``script`` as ``__main__`` with ``nnabla`` names resolving to dpnb, as
    ``python script args...`` would run it (argv, sys.path[0], and an uncaught error's
    traceback from the program's own frames on, with status 1)."""
    from dpnb.nnabla_alias import use_as_nnabla

    use_as_nnabla()
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except Exception as e:   # the program's own error, not the command's: as python shows it
        frames = e.__traceback__
        while frames is not None and frames.tb_frame.f_code.co_filename != script:
            frames = frames.tb_next
        traceback.print_exception(type(e), e, frames or e.__traceback__)
        return 1
    return 0


def cluster_start(n: int | None, where: dict, cluster_id: str, timeout: float,
                  mpi_args: list[str], listen: dict | None = None) -> int:
    """Start MPI engines that outlive this command, in an IPython profile (installed if
    missing); ``listen``: the controller's ``ip``, ``location``, ``curve`` and ``insecure``,
    as in ``start``."""
    from dpnb.cluster import Cluster
    from dpnb.cluster.profile import CONFIG_FILE, install, profile_dir

    if where.get("profile") == "mpi" and not (profile_dir() / CONFIG_FILE).exists():
        install()
    cluster = Cluster(n, **where, cluster_id=cluster_id, timeout=timeout, mpi_args=mpi_args,
                      progress=False, stop_at_exit=False, **(listen or {}))
    cluster.start()
    print(cluster.topology())
    options = _cluster_options(where, cluster_id)
    client = ", ".join(f"{k}={v!r}" for k, v in {**where, "cluster_id": cluster_id}.items()
                       if v or k != "cluster_id")
    print(f"connect with: ipyparallel.Client({client}); "
          f"stop with: dpnb cluster stop{options}")
    cluster.client.close()
    return 0


def _cluster_options(where: dict, cluster_id: str) -> str:
    """The command-line options that name a cluster."""
    options = "".join(f" --{k.replace('_', '-')} {v}" for k, v in where.items())
    return options + (f" --cluster-id {cluster_id}" if cluster_id else "")


def cluster_stop(where: dict, cluster_id: str, timeout: float) -> int:
    """Stop the cluster, whatever is left of it: every process that belongs to it ends."""
    from dpnb.cluster.elsewhere import stop_cluster

    found = stop_cluster(**where, cluster_id=cluster_id, timeout=timeout)
    ended = f"; ended {found.describe()}" if found.processes else ""
    named = (f"profile {where['profile']!r}" if "profile" in where
             else f"profile directory {where['profile_dir']}")
    print(f"stopped the cluster in {named}{f' (cluster id {cluster_id!r})' if cluster_id else ''}"
          f"{ended}")
    return 0


EXIT_STATUSES = {
    "status": "0 the cluster runs, 3 none does, 4 only part of it is left "
              "(`dpnb cluster stop` ends that)",
    "where": "0 every engine answered, 3 some did not (their stacks are missing)",
}
COMMON_STATUSES = "1 an error (its message on stderr), 2 a usage mistake"
STATUS_CODES = {"running": 0, "not running": 3, "no engines": 4, "no controller": 4}


def cluster_status(where: dict, cluster_id: str, timeout: float) -> int:
    """Print the engines, or what is wrong; the exit status of ``STATUS_CODES``."""
    from dpnb.cluster.elsewhere import cluster_status as status_of

    status = status_of(**where, cluster_id=cluster_id, timeout=timeout)
    if status.topology is not None:
        print(status.topology)
    print(status.message)
    return STATUS_CODES[status.state]


def cluster_where(where: dict, cluster_id: str, timeout: float) -> int:
    """Print every engine's Python stack, answered within 2 s busy or not (for a
    terminal while the notebook waits in a ``%%px`` cell); exit 3 if some did not answer."""
    from dpnb.cluster import Cluster
    from dpnb.errors import DpnbError
    from dpnb.notebook.stacks import where as stacks_of

    cluster = Cluster.attach(**where, cluster_id=cluster_id, timeout=timeout)
    try:
        if cluster.view is None:
            raise DpnbError(f"the cluster has no engines registered; `dpnb cluster status"
                            f"{_cluster_options(where, cluster_id)}` says what is left of it")
        stacks = stacks_of(cluster.view)
    finally:
        cluster.client.close()  # detached, not stopped
    print(stacks.table())
    for rank, text in stacks.stacks.items():
        print(f"\n## rank {rank}\n{text}")
    return 3 if stacks.missing else 0


def profile_install(ipython_dir: str | None, force: bool) -> int:
    """Install the IPython profile "mpi"; say where, and where a replaced config was kept."""
    from dpnb.cluster.profile import install

    installed = install(ipython_dir, force=force)
    print(f"installed the IPython profile 'mpi' at {installed.config.parent}")
    if installed.backup is not None:
        print(f"the config it replaced is kept as {installed.backup}")
    print("start it with: ipcluster start --profile=mpi -n 2   "
          "(or from JupyterLab's IPython Clusters panel)")
    return 0


def doctor() -> int:
    """Print each prerequisite as found or missing, with the command that fixes it."""
    from dpnb.cluster.checks import all_checks

    checks = all_checks()
    width = max(len(c.name) for c in checks)
    for c in checks:
        state = "found" if c.found else ("missing" if c.required else "missing (optional)")
        print(f"{c.name:<{width}}  {state:<18}  {c.detail}")
        if not c.found and c.fix:
            print(f"{'':<{width}}  fix: {c.fix}")
    missing = [c.name for c in checks if c.required and not c.found]
    print("ready for MPI engines" if not missing else f"not ready: {', '.join(missing)} missing")
    return 1 if missing else 0


def copy_notebooks(directory: str, force: bool) -> int:
    """Copy the tutorial notebooks that ship with dpnb into ``directory``, for JupyterLab."""
    from dpnb.errors import DpnbError
    from dpnb.tutorial_command import TUTORIALS

    target = Path(directory)
    notebooks = sorted(TUTORIALS.glob("*.ipynb"))
    if not notebooks:
        raise DpnbError(f"expected the tutorial notebooks in {TUTORIALS}, found none; "
                        "reinstall dpnb")
    existing = [target / n.name for n in notebooks if (target / n.name).exists()]
    if existing and not force:
        raise DpnbError(f"{', '.join(map(str, existing))} already exist; pass --force to "
                        "replace them (the changes made there would be lost)")
    target.mkdir(parents=True, exist_ok=True)
    for notebook in notebooks:
        shutil.copyfile(notebook, target / notebook.name)
        print(f"copied {notebook.name}")
    print(f"open them with: jupyter lab {shlex.quote(str(target))}")
    return 0


DESCRIPTION = ("Data-parallel neural-network training from Jupyter notebooks, with nnabla's "
               "API, over MPI and NCCL.  `dpnb COMMAND --help` shows a command's options.")


def positive_int(text: str) -> int:
    """An argparse type: a whole number above zero."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number above 0, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` (default: this process's arguments); its exit status."""
    from dpnb.errors import DpnbError

    args = parser().parse_args(argv)
    if args.command == "run" and not args.program:
        args.command_parser.error("expected the program to run and its arguments, e.g. "
                                  "`dpnb run train.py --epochs 1`")
    if args.command == "run" and not os.path.isfile(args.program[0]):   # as `python` has it
        args.command_parser.error(f"expected a Python program, found no file "
                                  f"{args.program[0]!r}")
    try:
        status = dispatch(args)
        sys.stdout.flush()   # a pipe's reader that has gone shows here, not at exit
        return status
    except DpnbError as e:
        print(f"{args.command_parser.prog}: {e}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as e:
        extra = EXTRAS.get((e.name or "").partition(".")[0])
        if extra is None:
            raise
        print(f"{args.command_parser.prog}: needs {e.name}, which is not installed; "
              f"install it with `pip install 'dpnb[{extra}]'`", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{args.command_parser.prog}: interrupted", file=sys.stderr)
        return 130   # as a shell reports a command that SIGINT ended
    except BrokenPipeError:   # e.g. `dpnb cluster where | head`: the reader has gone
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())   # so that the exit's flush does not fail too
        return 1


# The optional modules of the commands, with the extra that installs each.
EXTRAS = {name: "cluster" for name in ("ipyparallel", "IPython", "psutil", "tqdm", "matplotlib",
                                        "nbclient", "nbformat", "jupyter_client", "ipykernel")}
EXTRAS.update(mpi4py="mpich")


def parser() -> argparse.ArgumentParser:
    """The command line of ``dpnb``."""
    from dpnb import __version__, nnabla_version

    parser = argparse.ArgumentParser(prog="dpnb", description=DESCRIPTION)
    parser.add_argument("--version", action="version",
                        version=f"dpnb {__version__} (nnabla {nnabla_version}'s API)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, **kwargs) -> argparse.ArgumentParser:
        p = commands.add_parser(name, help=help, description=kwargs.pop("description", help),
                                **kwargs)
        p.set_defaults(command_parser=p)
        return p

    p = command("run", "run an nnabla program on dpnb, no line changed "
                       "(nnabla, nnabla.*, nnabla_ext.* resolve to dpnb)")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="SCRIPT [ARG ...]",
                   help="the program, e.g. train.py, and its own arguments")
    p = command("demo", "train the tutorial network in one process")
    p.add_argument("--steps", type=positive_int, default=10, help="training steps (default: 10)")
    p.add_argument("--context", choices=["cpu", "cuda", "cudnn"], default=None,
                   help="default: cudnn where a GPU is usable, else cpu")
    cluster_commands(command("cluster", "start, stop or show MPI engines in an IPython profile"))
    p = command("profile", "install the IPython profile 'mpi'")
    install = p.add_subparsers(dest="action", required=True, metavar="ACTION").add_parser(
        "install", help="write the profile's ipcluster config",
        description="write the profile's ipcluster config")
    install.set_defaults(command_parser=install)
    install.add_argument("--ipython-dir", default=None,
                         help="default: $IPYTHONDIR or ~/.ipython")
    install.add_argument("--force", action="store_true",
                         help="replace a different existing config (kept as a .bak copy)")
    command("doctor", "check MPI, ipyparallel, CuPy, GPUs and NCCL")
    p = command("tutorial", "run the tutorial notebook headless on a fresh local cluster "
                            "and print its all_reduce table")
    p.add_argument("--notebook", default=None,
                   help="default: the English tutorial that ships with dpnb")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds allowed per cell (default: 300)")
    p = command("notebooks", "copy the tutorial notebooks into a folder, for JupyterLab")
    p.add_argument("directory", help="the folder (created if missing)")
    p.add_argument("--force", action="store_true", help="replace notebooks already there")
    return parser


def cluster_commands(p: argparse.ArgumentParser) -> None:
    """``dpnb cluster start|stop|status|where``, each with its own options."""
    naming = argparse.ArgumentParser(add_help=False)
    where = naming.add_mutually_exclusive_group()
    where.add_argument("--profile", default="mpi", help="IPython profile name (default: mpi)")
    where.add_argument("--profile-dir", default=None, help="a profile directory instead")
    naming.add_argument("--cluster-id", default="", help="for several clusters in one profile")
    naming.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to wait for the controller and engines (default: 60)")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    helps = {"start": "start MPI engines that outlive this command",
             "stop": "stop the cluster, whatever is left of it",
             "status": "print the engines, or what is wrong",
             "where": "print every engine's Python stack, busy or not"}
    for action, help in helps.items():
        statuses = "; ".join(s for s in (EXIT_STATUSES.get(action), COMMON_STATUSES) if s)
        sub = actions.add_parser(action, parents=[naming], help=help, description=help,
                                 epilog=f"exit status: {statuses}")
        sub.set_defaults(command_parser=sub)
        if action == "start":
            start = sub
    start.add_argument("-n", type=positive_int, default=None,
                       help="engines to start (default: one per GPU, else per CPU core)")
    start.add_argument("--mpi-args", default="",
                       help="extra mpiexec arguments, e.g. '-f hostfile'")
    start.add_argument("--ip", default=None, help="the address the controller listens on, for "
                                                  "engines on other hosts (default: 127.0.0.1)")
    start.add_argument("--location", default=None,
                       help="this host's name as the engines reach it (for --ip '*')")
    start.add_argument("--curve", action="store_true", help="CurveZMQ encryption (with --ip)")
    start.add_argument("--insecure", action="store_true",
                       help="allow --ip beyond 127.0.0.1 without --curve (a trusted network only)")


def dispatch(args) -> int:
    """Run the parsed command; its exit status."""
    if args.command == "run":
        return run_script(args.program[0], args.program[1:])
    if args.command == "demo":
        return demo(args.steps, args.context)
    if args.command == "profile":
        return profile_install(args.ipython_dir, args.force)
    if args.command == "doctor":
        return doctor()
    if args.command == "notebooks":
        return copy_notebooks(args.directory, args.force)
    if args.command == "tutorial":
        from dpnb.tutorial_command import run

        return run(args.notebook, args.timeout)
    return cluster(args)


def cluster(args) -> int:
    """``dpnb cluster start|stop|status|where``, with the cluster's log lines on stderr."""
    where = {"profile_dir": args.profile_dir} if args.profile_dir else {"profile": args.profile}
    handler = logging.StreamHandler()              # e.g. the files of a crashed cluster removed
    handler.setFormatter(logging.Formatter("dpnb: %(message)s"))
    logging.getLogger("dpnb").addHandler(handler)
    try:
        if args.action == "start":
            return cluster_start(args.n, where, args.cluster_id, args.timeout,
                                 shlex.split(args.mpi_args),
                                 {"ip": args.ip, "location": args.location, "curve": args.curve,
                                  "insecure": args.insecure})
        if args.action == "stop":
            return cluster_stop(where, args.cluster_id, args.timeout)
        if args.action == "where":
            return cluster_where(where, args.cluster_id, args.timeout)
        return cluster_status(where, args.cluster_id, args.timeout)
    finally:
        logging.getLogger("dpnb").removeHandler(handler)


if __name__ == "__main__":
    sys.exit(main())
