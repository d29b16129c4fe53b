"""Check dpnb's GPU paths (CuPy, NCCL) against NumPy, and time them, in one bounded run.

    python benchmarks/gpu_check.py [--quick] [--only STAGE,...] [--budget SECONDS]
    python benchmarks/gpu_check.py --cpu-dry-run --quick    # this script's logic, no GPU

Every stage runs in a process of its own with a time limit, the communicator stages
under ``mpiexec`` (found by ``dpnb.communicators.find_mpiexec``):

- environment: Python, NumPy, CuPy, CUDA runtime and driver, GPUs, NCCL, mpi4py, MPI.
- functions: every case of tests/nnabla_cases/functions_*.py (the calls the tests
  compare with nnabla's recorded values), and a seeded call of each function they
  cannot hold (random draws, sync batch normalization with a communicator of its
  process alone), on the GPU context and on the CPU context with the same inputs;
  outputs, gradients and in-place updates compared (float32).
- solvers: three updates (weight decay, gradient clipping, update) of every solver.
- resnet23: one ResNet-23 training step (nmaps=16, batch 8): loss, gradients, the
  updated parameters and running statistics, and the loss after the step.
- save_load: parameters saved from the GPU, loaded back into a fresh GPU registry,
  over an existing network's parameters, and onto the CPU.
- comm_nccl: 1 rank over NCCL: all_reduce of flat-storage gradients and of separate
  CuPy arrays (division off and on), bcast, all_gather, reduce_scatter.
- comm_host_staged: the same on 2 ranks sharing GPU 0, with NCCL turned off
  (``use_nccl = False``; NCCL refuses two ranks on one GPU): CuPy arrays through host
  memory over MPI, the path a GPU context takes where NCCL is missing.
- comm_nccl_2gpus: 2 ranks over NCCL, one GPU each (skipped with fewer GPUs).
- time_resnet23: ResNet-23 training step (nmaps=64, batch 64, Adam), whole and by
  phase, in turns with PyTorch's step of the identical network on the same GPU
  (``benchmarks/train_step.py``'s, cuDNN with PyTorch's default settings) where
  PyTorch with CUDA is installed: the ratio dpnb / PyTorch.
- time_allreduce_*: all_reduce bandwidth of one CuPy array, 4 KB .. 256 MB, beside a
  raw CuPy copy of the same bytes on the same GPU (the reference), for each path.

Times are medians of several repetitions, with the CUDA stream synchronised before
and after each; on several ranks, the slowest rank's.  algbw = bytes / time,
busbw = algbw * 2(n-1)/n (nccl-tests' definition for all_reduce, so 0 on one rank);
the copy's GB/s count each byte once, though the GPU reads and writes it.  The summary
is a Markdown table of every stage (PASS, FAIL or SKIP, seconds, the headline figure),
for the README to quote; a GPU run records its results in
benchmarks/results/gpu_check.json, unless ``--json PATH`` sends them to PATH; the exit
status is 1 if any stage failed.

``--cpu-dry-run`` runs the same code on the NumPy-backed CuPy stand-in of the tests
(``tests/standin``, 2 stand-in GPUs, smaller sizes): CuPy's API as dpnb meets it, without
a GPU, against the CPU context; PyTorch's reference, where installed, runs on the CPU;
the NCCL stages, which need a real GPU, are skipped.  Its results are written only where
``--json`` says.  ``--inject-failure STAGE`` exists to test this script: it shifts the
first reference that STAGE compares against (on every rank), so that the stage must fail.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import json
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # this checkout's dpnb, also where it is not installed

import dpnb as nn  # noqa: E402
import dpnb.communicators as C  # noqa: E402
import dpnb.functions as F  # noqa: E402
import dpnb.parametric_functions as PF  # noqa: E402
import dpnb.solvers as S  # noqa: E402
from dpnb.context import array_module_of, require_cupy, to_module  # noqa: E402
from dpnb.ext_utils import get_extension_context  # noqa: E402
from dpnb.models import resnet23_prediction  # noqa: E402
from dpnb.testing import Checks, rank_data, run_ranks, time_in_turns  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
from nnabla_cases import functions as harness  # noqa: E402  (the tests' function cases)
from standin import environment as standin_environment  # noqa: E402
from timing import (Output, add_output_options, dpnb_adam_phases, output_of,  # noqa: E402
                    torch_adam_step)
from train_step import torch_resnet23_loss  # noqa: E402

REFERENCE = get_extension_context("cpu")
HARNESS_LIB = harness.library(nn, F, PF)
SEED = 313
MB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Stage:
    """One check or timing, run in a process (or MPI job) of its own."""

    name: str
    ranks: int      # 0: one plain process; else this many MPI ranks under mpiexec
    gpus: int       # GPUs it needs; skipped where fewer exist
    timeout: float  # seconds
    what: str
    nccl: bool = False  # needs NCCL: skipped in a dry run (the stand-in has none)


STAGES = [
    Stage("environment", 0, 0, 120, "versions, GPUs, NCCL, MPI"),
    Stage("functions", 0, 1, 300, "every F function, forward and backward, GPU vs CPU"),
    Stage("solvers", 0, 1, 120, "every solver, 3 updates, GPU vs CPU"),
    Stage("resnet23", 0, 1, 180, "ResNet-23 (nmaps=16, batch 8) training step, GPU vs CPU"),
    Stage("save_load", 0, 1, 60, "parameters saved from the GPU and loaded back"),
    Stage("comm_nccl", 1, 1, 120, "collectives over NCCL, 1 rank, vs NumPy", nccl=True),
    Stage("comm_host_staged", 2, 1, 120, "collectives without NCCL, 2 ranks on GPU 0, vs NumPy"),
    Stage("comm_nccl_2gpus", 2, 2, 120, "collectives over NCCL, 2 ranks on 2 GPUs, vs NumPy",
          nccl=True),
    Stage("time_resnet23", 0, 1, 240, "ResNet-23 (nmaps=64, batch 64) training step vs PyTorch"),
    Stage("time_allreduce_nccl", 1, 1, 180, "all_reduce bandwidth, NCCL, 1 rank", nccl=True),
    Stage("time_allreduce_host_staged", 2, 1, 180, "all_reduce bandwidth, host-staged, 2 ranks"),
    Stage("time_allreduce_nccl_2gpus", 2, 2, 180, "all_reduce bandwidth, NCCL, 2 ranks",
          nccl=True),
]
STAGE_BY_NAME = {s.name: s for s in STAGES}


# -- what a stage works with --------------------------------------------------

class Device:
    """Where the checks compute: CuPy on the GPU (in a dry run, the stand-in's CuPy)."""

    def __init__(self, dry_run: bool):
        self.dry_run = dry_run
        self.xp = require_cupy()

    def context(self, device_id: int | str = 0) -> nn.Context:
        return get_extension_context("cudnn", device_id=device_id)

    def sync(self) -> None:
        """Wait for the work queued on the current CUDA stream."""
        self.xp.cuda.get_current_stream().synchronize()

    def memory_mib(self) -> float | None:
        """GPU memory held by CuPy's pool (None in a dry run, which holds none)."""
        if self.dry_run:
            return None
        return self.xp.get_default_memory_pool().total_bytes() / MB


class StageChecks(Checks):
    """The checks of one stage on one rank, with the stage's summary and numbers for the
    JSON results; under --inject-failure the first reference compared is shifted."""

    def __init__(self, rank: int, inject: bool):
        super().__init__(rank)
        self.inject = inject
        self.numbers: dict = {}
        self.summary = ""

    def close(self, got, expected, what: str, tol: float | None = None,
              relative: bool = True) -> bool:
        """``Checks.close``, by default relative to the largest finite |expected|."""
        if self.inject:
            expected, self.inject = np.asarray(expected), False
            expected = expected + expected.dtype.type(1)
        return super().close(got, expected, what, tol, relative)

    def result(self) -> dict:
        """What the JSON results keep of this stage on this rank."""
        failed = self.failed
        if failed:
            first = failed[0]
            summary = (f"{len(failed)} of {len(self.items)} checks failed; first: "
                       f"{first['check']}: {first['detail']}")
        else:
            summary = self.summary or (f"{len(self.items)} checks, worst error "
                                       f"{self.worst:.1e}")
        return {"ok": not failed and bool(self.items), "summary": summary,
                "checks": self.items, "numbers": self.numbers}


@dataclasses.dataclass
class Run:
    """One stage as run in one process (one rank)."""

    stage: Stage
    dry_run: bool
    quick: bool
    checks: StageChecks
    world: object | None = None  # mpi4py's COMM_WORLD on the communicator stages

    @functools.cached_property
    def device(self) -> Device:
        return Device(self.dry_run)

    @property
    def rank(self) -> int:
        return 0 if self.world is None else self.world.Get_rank()

    def say(self, text: str) -> None:
        if self.rank == 0:
            print(text, flush=True)


def host(array) -> np.ndarray:
    """A NumPy copy of ``array`` (so that later in-place updates do not reach it)."""
    return np.array(to_module(array, np))


def on_both(run: Run, what: str, compute: Callable[[], dict], tol: float) -> None:
    """Run ``compute()`` (named arrays out) under the device context and under the CPU
    context, each from no parameters and the same seed, and compare name by name."""
    results = []
    for ctx in (run.device.context(), REFERENCE):
        nn.clear_parameters()
        nn.seed(SEED)
        with nn.context_scope(ctx):
            results.append({name: host(v) for name, v in compute().items()})
    got, expected = results
    run.checks.true(list(got) == list(expected), f"{what}: same results on both",
                    f"{sorted(set(got) ^ set(expected))}")
    for name in (name for name in expected if name in got):
        run.checks.close(got[name], expected[name], f"{what}: {name}", tol)


# -- environment --------------------------------------------------------------

def _cuda_version(code: int) -> str:
    return f"{code // 1000}.{code % 1000 // 10}"


def _nccl_version(code: int) -> str:
    major, rest = divmod(code, 10000 if code >= 10000 else 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def environment(run: Run) -> None:
    info: dict = {"python": sys.version.split()[0], "numpy": np.__version__, "gpus": 0}
    try:
        import cupy
        info["cupy"] = cupy.__version__
        info["cuda_runtime"] = _cuda_version(cupy.cuda.runtime.runtimeGetVersion())
        info["cuda_driver"] = _cuda_version(cupy.cuda.runtime.driverGetVersion())
        info["gpus"] = cupy.cuda.runtime.getDeviceCount()
        props = [cupy.cuda.runtime.getDeviceProperties(i) for i in range(info["gpus"])]
        info["gpu_names"] = [p["name"].decode() for p in props]
        info["gpu_memory_gib"] = [round(p["totalGlobalMem"] / 2**30, 1) for p in props]
    except ImportError:
        info["cupy"] = "not installed"
    except Exception as e:  # noqa: BLE001 - a broken CUDA set-up is reported, not raised
        info["cuda_error"] = f"{type(e).__name__}: {e}"
    try:
        from cupy.cuda import nccl
        info["nccl"] = (_nccl_version(nccl.get_version()) if getattr(nccl, "available", False)
                        else "CuPy's NCCL binding is present but the library is not loaded")
    except ImportError as e:
        info["nccl"] = f"not available ({e})"
    try:
        import mpi4py
        mpi4py.rc.initialize = False  # the library's version needs no MPI_Init
        from mpi4py import MPI
        info["mpi4py"] = mpi4py.__version__
        info["mpi_library"] = MPI.Get_library_version().strip().splitlines()[0]
    except (ImportError, RuntimeError) as e:  # RuntimeError: no MPI library to load
        info["mpi4py"] = f"unusable: {type(e).__name__}: {e}"
    try:
        info["mpiexec"] = C.find_mpiexec()
    except nn.DpnbError as e:
        info["mpiexec"] = f"missing: {e}"
    for key, value in info.items():
        print(f"  {key:<15} {value}", flush=True)
    run.checks.numbers = info
    if run.dry_run:
        run.checks.true(getattr(run.device.xp, "STANDIN", False),
                        "dry run: the NumPy-backed stand-in is CuPy", f"CuPy {info['cupy']}")
        run.checks.summary = f"CPU dry run ({info['gpus']} stand-in GPUs)"
        return
    run.checks.true(info["gpus"] >= 1, "CuPy sees a GPU",
                    info.get("cuda_error", f"CuPy: {info['cupy']}"))
    names = ", ".join(info.get("gpu_names", []))
    run.checks.summary = (f"{info['gpus']} GPU(s) ({names}); CuPy {info['cupy']}, CUDA "
                          f"{info.get('cuda_runtime')}; NCCL {info['nccl']}")


# -- functions ----------------------------------------------------------------

@functools.cache
def single_rank_communicator(extension: str) -> C.MultiProcessCommunicator:
    """A communicator of this process alone (MPI singleton), for F.sync_batch_normalization."""
    comm = C.MultiProcessCommunicator(get_extension_context(extension))
    comm.init()
    return comm


def unrecorded_cases() -> dict[str, tuple[Callable, list[tuple[np.ndarray, bool]]]]:
    """A seeded call of each F function the shared nnabla cases cannot hold (random
    draws, a communicator), with its inputs and their need_grad."""
    rng = np.random.RandomState(0)

    def x(*shape):
        return rng.randn(*shape).astype(np.float32), True

    def fixed(array):
        return array, False

    def bn_stat(value):
        return fixed(np.full((1, 3, 1, 1), value, np.float32))

    def sync_bn(a, *params):
        comm = single_rank_communicator(nn.get_current_context().extension)
        return F.sync_batch_normalization(a, *params, comm)

    images = x(2, 3, 6, 6)
    return {
        "sync_batch_normalization": (sync_bn, [x(4, 3, 5, 5), x(1, 3, 1, 1), x(1, 3, 1, 1),
                                               bn_stat(0.1), bn_stat(1.2)]),
        "dropout": (lambda a: F.dropout(a, p=0.3, seed=7), [x(4, 5, 6)]),
        "image_augmentation": (lambda a: F.image_augmentation(
            a, shape=(3, 5, 5), min_scale=0.8, max_scale=1.2, angle=0.3, flip_lr=True,
            contrast=1.2, seed=5), [fixed(images[0])]),
        "rand": (lambda: F.rand(-1, 2, (3, 4), seed=3), []),
        "randn": (lambda: F.randn(0.5, 2, (3, 4), seed=3), []),
        "randint": (lambda: F.randint(0, 9, (3, 4), seed=3), []),
        "rand_binomial": (lambda: F.rand_binomial(5, 0.3, (3, 4), seed=3), []),
        "rand_beta": (lambda: F.rand_beta(0.7, 1.5, (3, 4), seed=3), []),
        "rand_gamma": (lambda: F.rand_gamma(1.5, 2.0, (3, 4), seed=3), []),
        "random_choice": (lambda a, w: F.random_choice(a, w, (5,), seed=3),
                          [x(2, 4), fixed(rng.rand(2, 4).astype(np.float32))]),
        "random_crop": (lambda a: F.random_crop(a, (2, 4, 4), seed=3), [images]),
        "random_flip": (lambda a: F.random_flip(a, (3,), seed=3), [images]),
        "random_shift": (lambda a: F.random_shift(a, (0, 0, 1, 2), seed=3), [images]),
        "random_erase": (lambda a: F.random_erase(a, prob=0.9, seed=3), [images]),
    }


def public_functions() -> list[str]:
    """The names every family module of dpnb.functions exports."""
    modules = [m for m in vars(F).values()
               if isinstance(m, ModuleType) and m.__name__.startswith(F.__name__ + ".")]
    return sorted(name for m in modules for name in getattr(m, "__all__", []))


def call_case(fn: Callable, inputs: list[tuple[np.ndarray, bool]]) -> dict:
    """Forward, then backward from a fixed output gradient where the output has one."""
    xs = [nn.Variable.from_numpy_array(a, need_grad=g) for a, g in inputs]
    y = fn(*xs)
    y.forward()
    out = {"output": y.d}
    if y.need_grad:
        y.backward(np.asarray(np.random.RandomState(1).randn(*y.shape), dtype=y.dtype))
        out.update((f"gradient of input {i}", v.g) for i, v in enumerate(xs) if v.need_grad)
    # inputs without a gradient may be updated in place (batch-norm running statistics)
    out.update((f"input {i} after the call", v.d) for i, v in enumerate(xs) if not v.need_grad)
    return out


def functions(run: Run) -> None:
    """Every case of tests/nnabla_cases/functions_*.py (those the tests compare with
    nnabla), and a seeded call of each function they cannot hold, on both contexts."""
    cases = harness.all_cases()
    unrecorded = unrecorded_cases()
    called = harness.called_functions(HARNESS_LIB, [case for _, case in cases])
    missing = sorted(set(public_functions()) - called - set(unrecorded))
    run.checks.true(not missing, "every public F function is called here",
                    f"add cases for {missing} to tests/nnabla_cases/functions_*.py, or to "
                    "unrecorded_cases() where nnabla's values cannot be recorded")
    for family, case in cases:
        with run.checks.guard(f"{family}:{case.name}"):
            on_both(run, f"{family}:{case.name}", functools.partial(harness.run, HARNESS_LIB, case),
                    tol=1e-4)
    for name, (fn, inputs) in unrecorded.items():
        with run.checks.guard(f"F.{name}"):
            on_both(run, f"F.{name}", functools.partial(call_case, fn, inputs), tol=1e-4)
    run.checks.numbers = {"functions": len(public_functions()), "cases": len(cases) + len(unrecorded),
                          "worst_error": run.checks.worst}
    run.checks.summary = (f"{len(public_functions())} functions in {len(cases) + len(unrecorded)} "
                          f"cases, {len(run.checks.items)} checks, worst error "
                          f"{run.checks.worst:.1e} (tolerance 1e-4)")


# -- solvers ------------------------------------------------------------------

def solver_classes() -> list[type]:
    return [cls for cls in (getattr(S, name) for name in S.__all__)
            if isinstance(cls, type) and issubclass(cls, S.Solver) and cls is not S.Solver]


def solver_updates(cls: type) -> dict:
    """Three steps of weight decay, clipping and update from the same gradients; the
    change of each parameter at each step."""
    rng = np.random.RandomState(2)
    params = {f"w{i}": nn.get_parameter_or_create(f"w{i}", shape, rng.randn(*shape))
              for i, shape in enumerate([(3, 4), (5,), (2, 3, 3)])}
    solver = cls()
    solver.set_parameters(params)
    out = {}
    for step in range(3):
        before = {name: host(p.d) for name, p in params.items()}
        for p in params.values():
            p.g = rng.randn(*p.shape)
        solver.weight_decay(1e-2)
        solver.clip_grad_by_norm(1.0)
        if solver.check_inf_or_nan_grad():
            raise nn.DpnbError("check_inf_or_nan_grad() found NaN or infinity in finite gradients")
        solver.update()
        out.update((f"step {step} change of {name}", host(p.d) - before[name])
                   for name, p in params.items())
    return out


def solvers(run: Run) -> None:
    classes = solver_classes()
    for cls in classes:
        with run.checks.guard(cls.__name__):
            on_both(run, cls.__name__, functools.partial(solver_updates, cls), tol=1e-4)
    run.checks.summary = (f"{len(classes)} solvers, {len(run.checks.items)} checks, worst "
                          f"error {run.checks.worst:.1e} (tolerance 1e-4)")


# -- ResNet-23 training step -----------------------------------------------------

def resnet23_loss(batch: int, nmaps: int) -> nn.Variable:
    """Mean cross-entropy of ResNet-23 on fixed random images and labels."""
    rng = np.random.RandomState(1)
    image = nn.Variable.from_numpy_array(rng.randn(batch, 3, 32, 32).astype(np.float32))
    label = nn.Variable.from_numpy_array(rng.randint(0, 10, (batch, 1)).astype(np.int32))
    return F.mean(F.softmax_cross_entropy(resnet23_prediction(image, nmaps=nmaps), label))


def resnet23_step() -> dict:
    loss = resnet23_loss(batch=8, nmaps=16)
    solver = S.Momentum(lr=0.1)
    solver.set_parameters(nn.get_parameters())
    loss.forward()
    solver.zero_grad()
    loss.backward()
    out = {"loss": host(loss.d)}
    out.update((f"gradient of {name}", host(p.g)) for name, p in nn.get_parameters().items())
    solver.update()
    out.update((f"{name} after the step", host(p.d))
               for name, p in nn.get_parameters(grad_only=False).items())
    loss.forward()
    out["loss after the step"] = host(loss.d)
    return out


def resnet23(run: Run) -> None:
    on_both(run, "ResNet-23 step", resnet23_step, tol=1e-3)
    run.checks.summary = (f"{len(run.checks.items)} checks (loss, gradients, parameters), "
                          f"worst error {run.checks.worst:.1e} (tolerance 1e-3)")


# -- save and load --------------------------------------------------------------

def small_network() -> None:
    """Parameters of every kind: convolution, batch norm (with running statistics), affine."""
    h = nn.Variable.from_numpy_array(np.ones((2, 3, 8, 8), np.float32))
    h = PF.batch_normalization(PF.convolution(h, 4, (3, 3), name="conv"), name="bn")
    PF.affine(h, 5, name="fc")


def save_load(run: Run) -> None:
    ctx = run.device.context()
    rng = np.random.RandomState(3)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "parameters.npz"
        nn.clear_parameters()
        with nn.context_scope(ctx):
            small_network()
            for p in nn.get_parameters(grad_only=False).values():
                p.d = rng.randn(*p.shape)
            saved = {name: (host(p.d), p.need_grad)
                     for name, p in nn.get_parameters(grad_only=False).items()}
            nn.save_parameters(path)
        for label, target, over_network in (("into a fresh GPU registry", ctx, False),
                                            ("over the network's, on the GPU", ctx, True),
                                            ("onto the CPU", REFERENCE, False)):
            nn.clear_parameters()
            with nn.context_scope(target):
                if over_network:
                    small_network()
                    for p in nn.get_parameters(grad_only=False).values():
                        p.data.zero()
                nn.load_parameters(path)
                loaded = nn.get_parameters(grad_only=False)
            run.checks.true(list(loaded) == list(saved),
                            f"{label}: the same names in the same order",
                            f"{list(loaded)} vs {list(saved)}")
            for name, (value, need_grad) in saved.items():
                p = loaded.get(name)
                if not run.checks.true(p is not None, f"{label}: {name} loaded"):
                    continue
                run.checks.close(p.d, value, f"{label}: {name} bit for bit", tol=0)
                run.checks.true(p.need_grad == need_grad, f"{label}: {name} need_grad")
                run.checks.true(array_module_of(p.d) is target.xp,
                                f"{label}: {name} on the context's device")
    run.checks.summary = f"{len(saved)} parameters, 3 ways back, {len(run.checks.items)} checks"


# -- communicator ---------------------------------------------------------------

def summed(n: int, case: int, shape, division: bool) -> np.ndarray:
    """The NumPy reference: the sum (or mean) over ``n`` ranks of their case data."""
    total = sum(rank_data(k, case, shape).astype(np.float64) for k in range(n))
    return (total / n if division else total).astype(np.float32)


class WarningCounter(logging.Handler):
    """Keeps the communicator's warnings: it warns once ("... through host memory ...")
    where it stages GPU arrays through host memory instead of using NCCL."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def open_communicator(run: Run, nccl: bool) -> tuple[C.MultiProcessCommunicator, nn.Context]:
    """The communicator and the context of this rank's arrays: a GPU context, one
    device per rank where there are enough (ranks share GPU 0 otherwise); without
    NCCL (``use_nccl = False``) the communicator takes its slower GPU path."""
    comm = C.MultiProcessCommunicator(run.device.context())
    comm.use_nccl = nccl
    comm.init()
    return comm, comm.ctx


def collectives(run: Run, nccl: bool) -> None:
    counter = WarningCounter()
    logging.getLogger(C.__name__).addHandler(counter)
    comm, ctx = open_communicator(run, nccl)
    n, r, ok = comm.size, comm.rank, run.checks
    if nccl:
        ok.true(comm.uses_nccl, "NCCL is available to CuPy (cupy.cuda.nccl)")
    shapes = [(3, 4), (20000,), (5,), (16, 8)]
    with nn.context_scope(ctx):
        xp = ctx.xp
        params = [nn.get_parameter_or_create(f"p{i}", s) for i, s in enumerate(shapes)]
        for division in (False, True):
            with ok.guard(f"all_reduce of flat-storage gradients, division={division}"):
                for i, p in enumerate(params):
                    p.g = rank_data(r, i, p.shape)
                before = comm.collectives_issued
                comm.all_reduce([p.grad for p in params], division=division)
                if nccl:
                    ok.true(comm.collectives_issued - before == 1,
                            f"flat-storage gradients in one collective, division={division}",
                            f"{comm.collectives_issued - before} collectives")
                for i, p in enumerate(params):
                    ok.close(p.g, summed(n, i, p.shape, division),
                             f"all_reduce flat-storage gradient {i}, division={division}", 1e-6)
            with ok.guard(f"all_reduce of separate arrays, division={division}"):
                arrays = [xp.asarray(rank_data(r, 10 + i, s)) for i, s in enumerate(shapes)]
                comm.all_reduce(arrays, division=division)
                for i, (a, s) in enumerate(zip(arrays, shapes)):
                    ok.close(a, summed(n, 10 + i, s, division),
                             f"all_reduce separate array {i}, division={division}", 1e-6)
        with ok.guard("bcast"):
            arrays = [xp.asarray(rank_data(r, 20 + i, s)) for i, s in enumerate(shapes)]
            comm.bcast(arrays, src=n - 1)
            for i, (a, s) in enumerate(zip(arrays, shapes)):
                ok.close(a, rank_data(n - 1, 20 + i, s), f"bcast array {i} from rank {n - 1}", 0)
        with ok.guard("all_gather"):
            gathered = [xp.zeros((6, 5), np.float32) for _ in range(n)]
            comm.all_gather(xp.asarray(rank_data(r, 30, (6, 5))), gathered)
            for k, a in enumerate(gathered):
                ok.close(a, rank_data(k, 30, (6, 5)), f"all_gather part of rank {k}", 0)
        for division in (False, True):
            with ok.guard(f"reduce_scatter, division={division}"):
                target = xp.zeros(7, np.float32)
                comm.reduce_scatter([xp.asarray(rank_data(r, 40 + k, 7)) for k in range(n)],
                                    target, division=division)
                ok.close(target, summed(n, 40 + r, 7, division),
                         f"reduce_scatter, division={division}", 1e-6)
    staged = any("host memory" in m for m in counter.messages)
    expect_staged = not nccl
    ok.true(staged == expect_staged, "GPU arrays went through host memory" if expect_staged
            else "no GPU array went through host memory",
            f"communicator warnings: {counter.messages}")
    path = "NCCL" if nccl else "host-staged MPI"
    ok.summary = f"{n} rank(s) over {path}, {len(ok.items)} checks"


# -- timings ----------------------------------------------------------------------

def torch_reference(run: Run, batch: int, nmaps: int) -> tuple[Callable | None, str]:
    """PyTorch's Adam step of the identical ResNet-23 (benchmarks/train_step.py) on the
    GPU (on the CPU in a dry run) and what it runs with; None and why where PyTorch, or
    its CUDA, is missing."""
    try:
        import torch
    except ImportError:
        return None, "PyTorch is not installed: no reference"
    device = "cpu" if run.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        return None, f"PyTorch {torch.__version__} has no CUDA here: no reference"
    step = torch_adam_step(*torch_resnet23_loss(batch, nmaps, device))
    if device == "cpu":
        return step, f"PyTorch {torch.__version__} on the CPU (dry run)"

    def synchronised_step():
        step()
        torch.cuda.synchronize()

    return synchronised_step, (f"PyTorch {torch.__version__}, cuDNN "
                               f"{torch.backends.cudnn.version()}, same GPU")


def time_resnet23(run: Run) -> None:
    nmaps, batch = (16, 8) if run.dry_run else (64, 64)
    reps = 2 if run.dry_run else 5 if run.quick else 20
    device = run.device
    nn.clear_parameters()
    with nn.context_scope(device.context()):
        loss = resnet23_loss(batch, nmaps)
        phases = dpnb_adam_phases(loss)

        def step():
            for phase in phases.values():
                phase()

        torch_step, reference = torch_reference(run, batch, nmaps)
        steps = {"step": step} if torch_step is None else {"step": step, "torch": torch_step}
        whole = time_in_turns(steps, reps, sync=device.sync)
        parts = time_in_turns(phases, reps, sync=device.sync)
        run.checks.true(np.isfinite(host(loss.d)).all(), "the loss stays finite",
                        f"loss {host(loss.d)}")
    numbers = {"nmaps": nmaps, "batch": batch, "reps": reps, "step_ms": 1e3 * whole["step"],
               "images_per_s": batch / whole["step"], "gpu_memory_mib": device.memory_mib(),
               "reference": reference}
    numbers.update((f"{name}_ms", 1e3 * t) for name, t in parts.items())
    if "torch" in whole:
        numbers.update(torch_step_ms=1e3 * whole["torch"], ratio=whole["step"] / whole["torch"])
    run.checks.numbers = numbers
    print(f"  ResNet-23 nmaps={nmaps} batch={batch}, median of {reps}: step "
          f"{numbers['step_ms']:.2f} ms ({numbers['images_per_s']:.0f} images/s); forward "
          f"{numbers['forward_ms']:.2f}, backward {numbers['backward_ms']:.2f}, update "
          f"{numbers['update_ms']:.2f} ms (each synchronised alone)", flush=True)
    compared = (f"; PyTorch {numbers['torch_step_ms']:.2f} ms, dpnb / PyTorch "
                f"{numbers['ratio']:.2f}x" if "torch" in whole else "")
    print(f"  {reference}{compared}", flush=True)
    run.checks.summary = (f"step {numbers['step_ms']:.2f} ms, {numbers['images_per_s']:.0f} "
                          f"images/s (nmaps={nmaps}, batch {batch}){compared or '; ' + reference}")


def sweep_sizes(quick: bool, dry_run: bool) -> list[int]:
    """4 KB up to 256 MB (1 MB with NumPy standing in), by 4x (by 64x with --quick)."""
    top = MB if dry_run else 256 * MB
    sizes = [4 << 10]
    while sizes[-1] * (64 if quick else 4) <= top:
        sizes.append(sizes[-1] * (64 if quick else 4))
    return sizes if sizes[-1] == top else sizes + [top]


def time_allreduce(run: Run, nccl: bool) -> None:
    comm, ctx = open_communicator(run, nccl)
    device, n, ok = run.device, comm.size, run.checks
    xp = ctx.xp
    with nn.context_scope(ctx):
        run.say(f"  {'bytes':>10} {'reps':>5} {'ms':>9} {'algbw':>8} {'busbw':>8} "
                f"{'copy GB/s':>10} {'algbw/copy':>11}")
        rows = []
        for nbytes in sweep_sizes(run.quick, run.dry_run):
            reps = 3 if run.dry_run else 5 if run.quick else 20 if nbytes <= 16 * MB else 10
            data = xp.zeros(nbytes // 4, np.float32)  # zeros stay zeros: no overflow over reps
            src, dst = xp.ones_like(data), xp.empty_like(data)
            t = time_in_turns({"all_reduce": functools.partial(comm.all_reduce, data),
                               "copy": functools.partial(xp.copyto, dst, src)},
                              reps, warmup=3, sync=device.sync, world=run.world)
            algbw = nbytes / t["all_reduce"] / 1e9
            row = {"bytes": nbytes, "reps": reps, "all_reduce_s": t["all_reduce"],
                   "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (n - 1) / n,
                   "copy_s": t["copy"], "copy_gbps": nbytes / t["copy"] / 1e9}
            rows.append(row)
            run.say(f"  {nbytes:>10} {reps:>5} {1e3 * row['all_reduce_s']:>9.3f} "
                    f"{algbw:>8.2f} {row['busbw_gbps']:>8.2f} {row['copy_gbps']:>10.2f} "
                    f"{algbw / row['copy_gbps']:>11.3f}")
        with ok.guard("all_reduce result after the sweep"):
            mine = xp.asarray(rank_data(comm.rank, 50, 1000))
            comm.all_reduce(mine)
            ok.close(mine, summed(n, 50, 1000, False), "all_reduce result", 1e-6)
    ok.numbers = {"ranks": n, "path": "NCCL" if nccl else "host-staged", "sweep": rows}
    top = rows[-1]
    ok.summary = (f"{n} rank(s), {top['bytes'] // MB} MB: algbw {top['algbw_gbps']:.1f} GB/s, "
                  f"busbw {top['busbw_gbps']:.1f}, copy {top['copy_gbps']:.1f} GB/s")


STAGE_FUNCTIONS: dict[str, Callable[[Run], None]] = {
    "environment": environment,
    "functions": functions,
    "solvers": solvers,
    "resnet23": resnet23,
    "save_load": save_load,
    "comm_nccl": lambda run: collectives(run, nccl=True),
    "comm_host_staged": lambda run: collectives(run, nccl=False),
    "comm_nccl_2gpus": lambda run: collectives(run, nccl=True),
    "time_resnet23": time_resnet23,
    "time_allreduce_nccl": lambda run: time_allreduce(run, nccl=True),
    "time_allreduce_host_staged": lambda run: time_allreduce(run, nccl=False),
    "time_allreduce_nccl_2gpus": lambda run: time_allreduce(run, nccl=True),
}


# -- one stage, in its own process (one rank) ---------------------------------------

def stage_main(args: argparse.Namespace) -> int:
    """Run one stage; rank 0 writes the result (every rank's checks) to
    ``args.result_file``.  The exit status is 1 where this rank's checks failed (on
    rank 0: any rank's)."""
    stage = STAGE_BY_NAME[args.stage]
    world = None
    if stage.ranks:
        from mpi4py import MPI
        world = MPI.COMM_WORLD
    rank = 0 if world is None else world.Get_rank()
    run = Run(stage, args.cpu_dry_run, args.quick,
              StageChecks(rank, args.inject_failure == stage.name), world)
    with run.checks.guard(f"stage {stage.name}"):
        STAGE_FUNCTIONS[stage.name](run)
    result = run.checks.result()
    if world is not None:
        ranks = world.gather(result, root=0)
        if run.rank == 0:
            result["checks"] = [dict(c, check=f"rank {k}: {c['check']}")
                                for k, r in enumerate(ranks) for c in r["checks"]]
            failed = [k for k, r in enumerate(ranks) if not r["ok"]]
            if failed:
                result["ok"] = False
                result["summary"] = (f"ranks {failed} failed; rank {failed[0]}: "
                                     f"{ranks[failed[0]]['summary']}")
    run.checks.report()
    if run.rank == 0:
        Path(args.result_file).write_text(json.dumps(result, default=float))
    return 0 if result["ok"] else 1


# -- the whole run --------------------------------------------------------------------

def launch(stage: Stage, args: argparse.Namespace, timeout: float) -> dict:
    """Run ``stage`` in a process (or MPI job) of its own, stopped after ``timeout`` seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        result_file = Path(tmp) / "result.json"
        command = [sys.executable, __file__, "--stage", stage.name,
                   "--result-file", str(result_file)]
        command += ["--cpu-dry-run"] * args.cpu_dry_run + ["--quick"] * args.quick
        if args.inject_failure:
            command += ["--inject-failure", args.inject_failure]
        env = standin_environment(device_count=2) if args.cpu_dry_run else None
        try:
            run = run_ranks(stage.ranks, command, timeout, env=env, capture=False)
        except nn.DpnbError as e:  # no mpiexec
            return {"ok": False, "summary": str(e), "checks": [], "numbers": {}}
        if run.timed_out:
            return {"ok": False, "summary": f"{run.ending}, the stage's limit or what was left "
                    "of --budget; its output is above", "checks": [], "numbers": {}}
        if not result_file.exists():
            return {"ok": False, "summary": f"{run.ending} before writing a result; its output "
                    "is above", "checks": [], "numbers": {}}
        result = json.loads(result_file.read_text())
    if run.returncode != 0 and result["ok"]:
        result["ok"] = False
        result["summary"] = f"{run.ending} (a rank failed); its output is above"
    return result


def print_summary(rows: list[dict]) -> None:
    """Every stage as a row of a Markdown table, for the README to quote."""
    width = max(len(s.name) for s in STAGES)
    print("\n## summary\n")
    print(f"| {'stage':<{width}} | result | seconds | notes |")
    print(f"|{'-' * (width + 2)}|--------|--------:|-------|")
    for row in rows:
        notes = row["summary"].replace("|", "\\|")
        print(f"| {row['stage']:<{width}} | {row['status']:<6} | {row['seconds']:>7.1f} | "
              f"{notes} |")


def main_run(args: argparse.Namespace, output: Output) -> int:
    only = {name.strip() for name in args.only.split(",")} if args.only else None
    unknown = (only or set()) - set(STAGE_BY_NAME)
    if unknown:
        raise SystemExit(f"--only: unknown stages {sorted(unknown)}; "
                         f"known: {', '.join(STAGE_BY_NAME)}")
    mode = "cpu-dry-run" if args.cpu_dry_run else "gpu"
    print(f"# dpnb GPU check ({mode}{', quick' if args.quick else ''}), budget {args.budget} s")
    deadline = time.monotonic() + args.budget
    gpus = 2 if args.cpu_dry_run else 1
    rows = []
    for stage in STAGES:
        if only is not None and stage.name != "environment" and stage.name not in only:
            continue
        row = {"stage": stage.name, "what": stage.what, "seconds": 0.0}
        left = deadline - time.monotonic()
        if stage.gpus > gpus:
            row.update(status="SKIP", summary=f"needs {stage.gpus} GPUs, {gpus} found")
        elif stage.nccl and args.cpu_dry_run:
            row.update(status="SKIP", summary="needs NCCL on a real GPU (the stand-in has none)")
        elif left < 5:
            row.update(status="FAIL", summary=f"not run: the --budget of {args.budget} s "
                       "was spent")
        else:
            print(f"\n## {stage.name}: {stage.what}", flush=True)
            start = time.monotonic()
            result = launch(stage, args, min(stage.timeout, left))
            row.update(result, status="PASS" if result.pop("ok") else "FAIL",
                       seconds=time.monotonic() - start)
            if stage.name == "environment" and not args.cpu_dry_run:
                gpus = max(1, int(result["numbers"].get("gpus", 0)))
        rows.append(row)
    print_summary(rows)
    passed = all(row["status"] != "FAIL" for row in rows)
    report = {"mode": mode, "quick": args.quick, "budget_s": args.budget,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "passed": passed, "stages": rows}
    print()
    output.write(report, indent=1, default=float)
    failed = [row["stage"] for row in rows if row["status"] == "FAIL"]
    print('all checks passed' if passed else 'FAILED: ' + ', '.join(failed))
    return 0 if passed else 1


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="stages: " + "; ".join(f"{s.name} ({s.what})" for s in STAGES))
    parser.add_argument("--quick", action="store_true",
                        help="the smallest useful run: fewer repetitions and sizes")
    parser.add_argument("--cpu-dry-run", action="store_true",
                        help="the tests' NumPy-backed CuPy stand-in plays the GPU (to test "
                             "this script and CuPy's use without a GPU)")
    parser.add_argument("--only", metavar="STAGE,...",
                        help="the stages to run (environment always runs)")
    parser.add_argument("--budget", type=float, default=450,
                        help="seconds for the whole run (default 450); stages that would "
                             "start later fail as not run")
    add_output_options(parser, "gpu_check", "a GPU run records its results (as with "
                       "--record) and a --cpu-dry-run prints them only")
    parser.add_argument("--inject-failure", metavar="STAGE", choices=list(STAGE_BY_NAME),
                        help="for testing this script: shift the first reference STAGE "
                             "compares against, so that it must fail")
    parser.add_argument("--stage", choices=list(STAGE_BY_NAME), help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stage:
        return stage_main(args)
    if args.cpu_dry_run and args.record:
        parser.error("--record: a --cpu-dry-run never replaces a GPU run's recorded results")
    return main_run(args, output_of(args, record_by_default=not args.cpu_dry_run))


if __name__ == "__main__":
    sys.exit(main())
