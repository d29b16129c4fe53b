"""What the benchmarks share beyond dpnb.testing's timing: where their results go
(``--json PATH``, ``--record``), a fresh worker process per framework, their references
(PyTorch where it is installed, nnabla where a Python has it), and the time of dpnb's
Adam training step."""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

# dpnb is imported where it is used: tutorial_step.py's nnabla worker, whose Python has no
# dpnb, parses its command line with the options below.
RESULTS = Path(__file__).resolve().parent / "results"   # the tracked reference results
DEFAULT_NNABLA_PYTHON = "/root/nnvenv/bin/python"


def add_output_options(parser: argparse.ArgumentParser, name: str,
                       default: str = "the results are printed only") -> None:
    """``--json PATH`` and ``--record`` on ``parser``, whose benchmark records its results
    as ``benchmarks/results/<name>.json``; ``default`` says what happens with neither."""
    group = parser.add_argument_group("results", f"Without --json or --record, {default}.")
    group.add_argument("--json", metavar="PATH", type=Path,
                       help="write the results as JSON to PATH")
    group.add_argument("--record", action="store_true",
                       help=f"write them to benchmarks/results/{name}.json, the reference "
                            "results kept in the repository")
    parser.set_defaults(results_name=name)


@dataclasses.dataclass
class Output:
    """Where a benchmark's results go: ``json``, the path ``--json`` gave, and ``record``,
    the tracked reference file where ``--record`` asked for it; with neither, nowhere
    (the results are printed only)."""
    json: Path | None
    record: Path | None

    def write(self, result: dict, **dumps) -> None:
        """Write ``result`` (``json.dumps(result, **dumps)``), with when and at which
        commit it was taken (``recorded``), to each path, atomically: a temporary file
        beside it replaces it."""
        text = json.dumps({**result, "recorded": recorded()}, **dumps) + "\n"
        paths = [path for path in (self.json, self.record) if path is not None]
        if not paths:
            print("results not written (--help says how to write them)")
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            try:
                temporary.write_text(text)
                os.replace(temporary, path)
            finally:
                temporary.unlink(missing_ok=True)
            print(f"wrote {path}")


def blas_kernel() -> str:
    """The BLAS library NumPy runs here and the kernel it chose for this processor, e.g.
    "OpenBLAS 0.3.31 SkylakeX": ``OPENBLAS_CORETYPE`` in the environment picks an older
    one (AVX2 on an AVX-512 machine), which the figures of matrix products depend on."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl is not installed)"
    import numpy  # noqa: F401  (loads its BLAS, which threadpoolctl then finds)

    for pool in threadpool_info():
        if pool["user_api"] == "blas":
            name = {"openblas": "OpenBLAS", "mkl": "MKL"}.get(pool["internal_api"],
                                                               pool["internal_api"])
            kernel = pool.get("architecture") or ""
            return " ".join(part for part in (name, pool.get("version"), kernel) if part)
    return "unknown (no BLAS found)"


def recorded() -> dict[str, str]:
    """Now (UTC, to the minute), this checkout's commit (``+changes`` where files other
    than the results differ from it), NumPy's BLAS kernel and what runs dpnb's compiled
    kernels (Numba or NumPy alone): what a result file says of when and on what it was
    measured."""
    from dpnb import kernels

    root = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                  f":!{RESULTS.relative_to(root)}")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return {"date": now, "commit": commit + ("+changes" if changed else ""),
            "blas": blas_kernel(), "kernels": kernels.backend()}


def output_of(args: argparse.Namespace, record_by_default: bool = False) -> Output:
    """The output that ``add_output_options``'s options in ``args`` ask for, which it takes
    out of ``args`` (so that ``vars(args)`` stays the benchmark's own settings).  With
    ``record_by_default``, a run given neither option records."""
    json_path, record, name = args.json, args.record, args.results_name
    del args.json, args.record, args.results_name
    record = record or (record_by_default and json_path is None)
    return Output(json_path, RESULTS / f"{name}.json" if record else None)


def torch_installed() -> bool:
    """Whether this Python can import PyTorch, the reference of the training benchmarks."""
    probe = [sys.executable, "-c", "import torch"]
    return subprocess.run(probe, capture_output=True).returncode == 0


def worker_parser(doc: str, name: str, steps: int = 10, runs: int = 3,
                  models: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line of a benchmark whose frameworks run as ``--worker`` processes:
    ``--steps``, ``--runs``, ``--worker FRAMEWORK`` (with ``models``, ``--model`` and
    ``--worker FRAMEWORK MODEL``) and the output options (results ``name``)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--runs", type=int, default=runs)
    if models is None:
        parser.add_argument("--worker", choices=["dpnb", "torch"])
    else:
        parser.add_argument("--model", nargs="+", choices=list(models), default=list(models))
        parser.add_argument("--worker", nargs=2, metavar=("FRAMEWORK", "MODEL"))
    add_output_options(parser, name)
    return parser


def alternate_workers(script: str, runs: int, steps: int) -> dict[str, list[dict]]:
    """``runs`` runs of ``script``'s dpnb worker and, where PyTorch is installed, its torch
    worker, alternately: framework -> the results of its runs."""
    frameworks = ["dpnb"] + (["torch"] if torch_installed() else [])
    results: dict[str, list[dict]] = {name: [] for name in frameworks}
    for _ in range(runs):
        for name in frameworks:
            results[name].append(run_worker(script, name, "--steps", str(steps)))
    return results


def serve_as_worker(args: argparse.Namespace, dpnb_worker: Callable[..., dict],
                    torch_worker: Callable[..., dict]) -> bool:
    """In a ``--worker`` process (``run_worker`` starts them): run that framework's worker
    (``--worker FRAMEWORK`` or ``--worker FRAMEWORK MODEL``: with the model first) for
    ``args.steps`` steps, print its figures as the JSON line ``run_worker`` reads, and
    return True; False in the benchmark's own process."""
    if not args.worker:
        return False
    framework, *model = [args.worker] if isinstance(args.worker, str) else args.worker
    worker = dpnb_worker if framework == "dpnb" else torch_worker
    print(json.dumps(worker(*model, args.steps)))
    return True


def median_figures(runs: dict[str, list[dict]], keys: Sequence[str]) -> dict:
    """Per framework, the median over its runs of each figure in ``keys``, with the runs."""
    return {name: {key: statistics.median(r[key] for r in rs) for key in keys} | {"runs": rs}
            for name, rs in runs.items()}


def add_ratios(result: dict, **figures: str) -> bool:
    """Where PyTorch ran, dpnb's median of each figure over PyTorch's, under the name given
    (``ratio_time="step_s"``), and True; else say how to add the reference, and False."""
    if "torch" not in result:
        print("PyTorch is not installed: `pip install torch==2.13.0` adds the reference")
        return False
    for ratio, key in figures.items():
        result[ratio] = result["dpnb"][key] / result["torch"][key]
    return True


def run_worker(script: str, *args: str, python: str = sys.executable) -> dict:
    """Run ``script --worker ...`` with ``python`` in a fresh one-thread process and return
    the JSON object its last output line holds (each framework measured in its own
    process)."""
    from dpnb.testing import ONE_THREAD

    cmd = [python, script, "--worker", *args]
    out = subprocess.run(cmd, env={**os.environ, **ONE_THREAD}, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(args)} worker ({python}) failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def nnabla_python(given: str | None) -> str | None:
    """The Python to run nnabla with, or None where there is none (an error where one was
    ``given`` and cannot run nnabla)."""
    candidate = given or os.environ.get("DPNB_NNABLA_PYTHON") or DEFAULT_NNABLA_PYTHON
    if not Path(candidate).exists():
        if given:
            raise SystemExit(f"--nnabla-python {given}: no such file; give the path of a Python "
                             "with nnabla installed")
        return None
    probe = subprocess.run([candidate, "-c", "import nnabla"], capture_output=True)
    if probe.returncode != 0:
        if given:
            raise SystemExit(f"--nnabla-python {given}: `import nnabla` fails there; install "
                             "nnabla into it (pip install nnabla==1.39.0)")
        return None
    return candidate


def nnabla_parser(doc: str, name: str, steps: int, runs: int) -> argparse.ArgumentParser:
    """The command line of a benchmark against nnabla: ``--steps``, ``--runs``,
    ``--nnabla-python``, ``--worker`` and the output options (results ``name``)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--runs", type=int, default=runs)
    parser.add_argument("--nnabla-python", default=None,
                        help=f"a Python with nnabla (default: $DPNB_NNABLA_PYTHON or "
                             f"{DEFAULT_NNABLA_PYTHON})")
    parser.add_argument("--worker", choices=["dpnb", "nnabla"])
    add_output_options(parser, name)
    return parser


def alternate_with_nnabla(script: str, args: argparse.Namespace) -> dict[str, list[dict]]:
    """``args.runs`` runs of ``script``'s dpnb worker and, where a Python with nnabla is
    found, its nnabla worker, alternately: framework -> the results of its runs."""
    pythons = {"dpnb": sys.executable}
    reference = nnabla_python(args.nnabla_python)
    if reference:
        pythons["nnabla"] = reference
    runs: dict[str, list[dict]] = {name: [] for name in pythons}
    for _ in range(args.runs):
        for name, python in pythons.items():
            runs[name].append(run_worker(script, name, "--steps", str(args.steps),
                                         python=python))
    return runs


NNABLA_MISSING = ("no Python with nnabla found: pass --nnabla-python PATH (or set "
                  "DPNB_NNABLA_PYTHON) to add the reference")


def dpnb_adam_phases(loss) -> dict[str, Callable[[], object]]:
    """A dpnb training step of ``loss`` in its phases: forward, backward (the gradients
    zeroed first) and the Adam update of every parameter, the step the training
    benchmarks compare with PyTorch's."""
    import dpnb as nn
    import dpnb.solvers as S

    solver = S.Adam()
    solver.set_parameters(nn.get_parameters())

    def backward():
        solver.zero_grad()
        loss.backward(clear_buffer=True)

    return {"forward": lambda: loss.forward(clear_no_need_grad=True), "backward": backward,
            "update": solver.update}


def dpnb_adam_step_seconds(loss, steps: int) -> float:
    """Median seconds of ``dpnb_adam_phases(loss)`` run as one step."""
    from dpnb.testing import median_seconds

    phases = list(dpnb_adam_phases(loss).values())

    def step():
        for phase in phases:
            phase()

    return median_seconds(step, steps, warmup=2)


def rss_mib() -> float:
    """This process's resident memory now, in MiB (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def torch_adam_step(loss, params):
    """A PyTorch training step of ``loss()`` (forward, backward, Adam update of ``params``),
    the step the training benchmarks compare with dpnb's."""
    import torch

    optimizer = torch.optim.Adam(params, lr=1e-3)

    def step():
        value = loss()
        optimizer.zero_grad()
        value.backward()
        optimizer.step()

    return step
