"""``MultiProcessCommunicator``: nnabla's multi-process data-parallel
communicator, one process per device, over MPI (mpi4py) and, for GPU arrays
in a GPU context, NCCL.

Every collective first checks its arguments here, then (unless turned off)
checks with the other ranks that they make the same call, then moves the data
through ``mpi.py`` (or ``nccl.py``), waiting interruptibly with a timeout
(``wait.py``).  A collective that times out or is interrupted leaves the
ranks out of step, so the communicator is then marked broken and refuses
further use."""
from __future__ import annotations

import collections
import dataclasses
import logging
import os
from collections.abc import Mapping

import numpy as np

from ..context import Context, array_module_of, get_current_context, require_cupy, to_module
from ..errors import DpnbError
from ..graph import Variable
from ..ndarray import NdArray
from ..parameter import get_parameters
from . import agreement, mpi
from .agreement import Call
from .callback import AllReduceCallback
from .nccl import NcclGroup, NcclPipeline, nccl_module
from .wait import CommunicatorError, timeout_from_env, wait_all, wait_until

logger = logging.getLogger(__name__)

_PLAN_CACHE_SIZE = 32  # schedules kept, one per list of arrays (all_reduce_callback: one per pack)


@dataclasses.dataclass
class _Group:
    """A named set of world ranks and, on its members, their MPI communicator."""

    name: str
    ranks: list[int]
    comm: object | None  # None on ranks outside the group
    rank: int = -1       # this process's rank within the group

    @property
    def size(self) -> int:
        return len(self.ranks)


def _env_bytes(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise DpnbError(f"{name} must be a positive number of bytes, got {raw!r}")
    return value


def _env_flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise DpnbError(f"{name} must be 1 or 0, got {raw!r}")


class MultiProcessCommunicator:
    """Collectives between the processes of an MPI job, one process per device.

    Attributes tune it (set them the same on every rank): ``timeout`` (seconds a
    collective may wait; ``DPNB_COMM_TIMEOUT``, default 600), ``check_agreement``
    (``DPNB_COMM_CHECK``, default on), ``use_nccl`` (``DPNB_COMM_NCCL``, default on; read by
    ``init``), ``segment_bytes`` (``DPNB_COMM_SEGMENT_BYTES``)
    and ``bucket_bytes`` (``DPNB_COMM_BUCKET_BYTES``).  ``collectives_issued``
    counts the data collectives sent to MPI."""

    def __init__(self, ctx: Context | None = None):
        self.ctx = ctx if ctx is not None else get_current_context()
        self.timeout = timeout_from_env()
        self.check_agreement = _env_flag("DPNB_COMM_CHECK", True)
        self.use_nccl = _env_flag("DPNB_COMM_NCCL", True)
        self.segment_bytes = _env_bytes("DPNB_COMM_SEGMENT_BYTES", mpi.DEFAULT_SEGMENT_BYTES)
        self.bucket_bytes = _env_bytes("DPNB_COMM_BUCKET_BYTES", mpi.DEFAULT_BUCKET_BYTES)
        self.collectives_issued = 0
        self._groups: dict[str, _Group] = {}
        self._local_rank = -1
        self._broken: str | None = None
        self._abandoned: list = []  # requests a failure left pending (MPI may still use them)
        self._plans: collections.OrderedDict = collections.OrderedDict()
        self._stager = mpi.Stager()
        self._warned_gpu_path = False
        self._cuda_aware_mpi = False
        self._nccl = None  # CuPy's NCCL module, for a GPU context where it is available
        self._nccl_groups: dict[str, NcclGroup] = {}

    # -- set-up ---------------------------------------------------------------
    def init(self) -> None:
        """Join the MPI job: learn size, rank and local rank, and set
        ``ctx.device_id`` to the local rank (one device per process on a host)."""
        if self._groups:
            return
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise DpnbError("the communicator needs mpi4py and an MPI library, which are not "
                            "installed; install them with `pip install 'dpnb[mpich]'`") from e
        world = MPI.COMM_WORLD.Dup()  # our traffic never meets the user's on COMM_WORLD
        local = world.Split_type(MPI.COMM_TYPE_SHARED)
        self._local_rank = local.Get_rank()
        local.Free()
        self._groups["world"] = _Group("world", list(range(world.Get_size())), world,
                                       world.Get_rank())
        self.ctx.device_id = str(self._local_rank)
        if self.ctx.is_gpu:
            # ranks beyond the host's GPU count share devices (NCCL then refuses: turn it off)
            self.ctx.device_id = str(self._local_rank
                                     % require_cupy().cuda.runtime.getDeviceCount())
            self._nccl = nccl_module() if self.use_nccl else None
            self._cuda_aware_mpi = mpi.cuda_aware_mpi(world)

    @property
    def timeout(self) -> float:
        """Seconds a collective may wait for the other ranks before failing."""
        return self._timeout

    @timeout.setter
    def timeout(self, seconds: float) -> None:
        if not float(seconds) > 0:
            raise DpnbError(f"comm.timeout must be a positive number of seconds, got {seconds!r}")
        self._timeout = float(seconds)

    @property
    def name(self) -> str:
        return "MultiProcessDataParallelCommunicator"

    @property
    def size(self) -> int:
        return self._world().size

    @property
    def rank(self) -> int:
        return self._world().rank

    @property
    def local_rank(self) -> int:
        self._world()
        return self._local_rank

    @property
    def staging_bytes(self) -> int:
        """Memory held by the staging buffers (bounded by the bucket size)."""
        return self._stager.nbytes

    # -- groups ---------------------------------------------------------------
    def new_group(self, name_ranks: tuple[str, list[int]]) -> str:
        """Create group ``name`` of the given world ranks (group rank i is
        ``ranks[i]``); returns its name.  Every member must call it (it waits for
        them without a timeout); non-members may, to learn the group."""
        self._check_usable()
        world = self._world()
        if not (isinstance(name_ranks, (tuple, list)) and len(name_ranks) == 2):
            raise DpnbError(f"new_group expects a (name, ranks) pair, got {name_ranks!r}")
        name, ranks = name_ranks
        if not isinstance(name, str) or not name:
            raise DpnbError(f"new_group needs a non-empty group name, got {name!r}")
        if name in self._groups:
            raise DpnbError(f"group {name!r} already exists with ranks {self._groups[name].ranks}; "
                            "choose another name")
        ranks = [int(r) for r in ranks]
        if (not ranks or len(set(ranks)) != len(ranks)
                or not all(0 <= r < world.size for r in ranks)):
            raise DpnbError(f"new_group {name!r} needs distinct ranks in 0..{world.size - 1}, "
                            f"got {ranks}")
        group = _Group(name, ranks, None)
        if world.rank in ranks:
            world_group = world.comm.Get_group()
            mpi_group = world_group.Incl(ranks)
            group.comm = world.comm.Create_group(mpi_group)
            mpi_group.Free()
            world_group.Free()
            group.rank = group.comm.Get_rank()
        self._groups[name] = group
        return name

    def list_groups(self) -> dict[str, list[int]]:
        """Every known group's world ranks, by name (``world`` included)."""
        self._world()
        return {name: list(g.ranks) for name, g in self._groups.items()}

    def find_group(self, group: str) -> list[int]:
        """The world ranks of ``group``, or an empty list if there is no such group."""
        self._world()
        g = self._groups.get(group)
        return list(g.ranks) if g is not None else []

    # -- collectives ----------------------------------------------------------
    def all_reduce(self, data, division: bool = False, inplace: bool = False,
                   group: str = "world") -> None:
        """Sum ``data`` (an NdArray, array, or list of them) over the group, in place
        on every rank; ``division=True`` gives the mean.  ``inplace`` is accepted for
        nnabla compatibility: dpnb always writes back in place and chooses the
        packing itself."""
        self._run("all_reduce", data, group, -1, division)

    def reduce(self, data, dst: int, division: bool = False, inplace: bool = False,
               group: str = "world") -> None:
        """Sum ``data`` over the group into rank ``dst`` (a rank of the group); the
        other ranks' arrays are left as they were."""
        self._run("reduce", data, group, dst, division)

    def bcast(self, data, src: int, inplace: bool = False, group: str = "world") -> None:
        """Copy ``data`` of rank ``src`` (a rank of the group) into the other ranks' arrays."""
        self._run("bcast", data, group, src, False)

    def all_gather(self, ndarray, ndarray_list: list, group: str = "world") -> None:
        """``ndarray_list[i]`` receives ``ndarray`` of group rank ``i``, on every rank."""
        operation = "all_gather"
        self._check_usable()
        g = self._member_group(group, operation)
        (source,), _ = _resolve([ndarray], operation)
        targets, _ = _resolve(_as_list(ndarray_list, operation, "ndarray_list"), operation)
        _check_list_matches(operation, targets, source, g, "ndarray_list", "ndarray")
        specs = [(a.dtype.str, tuple(a.shape)) for a in [source] + targets]
        self._agree(g, Call(operation, g.name, specs))
        stage = mpi.STAGE_DTYPES[source.dtype]
        send = _host(source).astype(stage, copy=False).reshape(-1)
        received = np.empty((g.size, send.size), stage)
        self._collective(g, operation, g.comm.Iallgather(send, received))
        for target, row in zip(targets, received):
            _write(target, row.reshape(target.shape), None)

    def reduce_scatter(self, ndarray_list: list, ndarray, division: bool = False,
                       group: str = "world") -> None:
        """``ndarray`` on group rank ``i`` receives the sum over ranks of their
        ``ndarray_list[i]`` (the mean with ``division=True``)."""
        operation = "reduce_scatter"
        self._check_usable()
        g = self._member_group(group, operation)
        sources, _ = _resolve(_as_list(ndarray_list, operation, "ndarray_list"), operation)
        (target,), _ = _resolve([ndarray], operation)
        _check_list_matches(operation, sources, target, g, "ndarray_list", "ndarray")
        if division:
            _require_float(operation, [target])
        specs = [(a.dtype.str, tuple(a.shape)) for a in sources + [target]]
        self._agree(g, Call(operation, g.name, specs, division=division))
        stage = mpi.STAGE_DTYPES[target.dtype]
        send = np.concatenate([_host(a).astype(stage, copy=False).reshape(-1) for a in sources])
        received = np.empty(target.size, stage)
        self._collective(g, operation, g.comm.Ireduce_scatter_block(send, received))
        _write(target, received.reshape(target.shape), g.size if division else None)

    def all_reduce_callback(self, data, pack_size: int, division: bool = False,
                            group: str = "world") -> AllReduceCallback:
        """A callback for ``loss.backward(communicator_callbacks=...)`` that
        all-reduces ``data`` while backward runs, in packs of about ``pack_size``
        elements, each as soon as all of its gradients are complete."""
        operation = "all_reduce_callback"
        self._check_usable()
        g = self._member_group(group, operation)
        if int(pack_size) <= 0:
            raise DpnbError(f"{operation}: pack_size must be a positive number of elements, "
                            f"got {pack_size}")
        objs = _as_list(data, operation)
        arrays, _ = _resolve(objs, operation)
        if division:
            _require_float(operation, arrays)
        on_gpu = all(array_module_of(a) is not np for a in arrays)
        return AllReduceCallback(self, g, objs, int(pack_size), division, on_gpu)

    def get_all_reduce_callback(self, params=None, pack_size: int = 2 << 20,
                                division: bool = True, group: str = "world") -> AllReduceCallback:
        """``all_reduce_callback`` averaging the gradients of ``params`` (default: every
        trainable parameter, ``nn.get_parameters()``), the helper nnabla's examples use."""
        if params is None:
            params = get_parameters()
        grads = [p.grad for p in (params.values() if isinstance(params, Mapping) else params)]
        if not grads:
            raise DpnbError("get_all_reduce_callback: there are no parameters to reduce; build "
                            "the network before asking for the callback, or pass params=")
        return self.all_reduce_callback(grads, pack_size, division, group)

    def barrier(self) -> None:
        """Wait until every rank has reached this call (interruptibly, with the timeout)."""
        self._check_usable()
        g = self._member_group("world", "barrier")
        if self.check_agreement:
            self._agree(g, Call("barrier", g.name, []))
        else:
            self._collective(g, "barrier", g.comm.Ibarrier())

    def abort(self) -> None:
        """End every process of the MPI job at once (``MPI_Abort``)."""
        from mpi4py import MPI

        MPI.COMM_WORLD.Abort(1)

    # -- internals ------------------------------------------------------------
    def _run(self, operation: str, data, group: str, root: int, division: bool) -> None:
        """All-reduce, reduce or broadcast through the chunk pipeline."""
        self._check_usable()
        g = self._member_group(group, operation)
        if operation != "all_reduce":
            if not isinstance(root, (int, np.integer)) or not 0 <= root < g.size:
                role = "dst" if operation == "reduce" else "src"
                raise DpnbError(f"{operation}: {role}={root!r} is out of range; group {g.name!r} "
                                f"has ranks 0..{g.size - 1} (ranks within the group)")
        plan = self._plan(_as_list(data, operation), operation)
        if division and not plan.all_float:
            _require_float(operation, plan.arrays)
        chunks = plan.chunks
        call = plan.call(operation, g.name, int(root), division)
        if self.check_agreement and not self._agree(g, call):
            chunks = plan.canonical()
        pipeline = self._pipeline(g, operation, int(root), division, plan.device)
        pipeline.add(chunks)
        self._run_pipeline(pipeline.drain, pipeline)

    def _plan(self, objs: list, operation: str, nccl: bool = True) -> mpi.Plan:
        """The (cached) schedule for these arrays; checks them on first use.  It is
        for NCCL where ``nccl`` allows, NCCL is in use and all arrays are on the GPU."""
        key = (tuple(map(id, objs)), self.segment_bytes, self.bucket_bytes, nccl)
        plan = self._plans.get(key)
        if plan is not None and plan.still_valid():
            self._plans.move_to_end(key)
            return plan
        arrays, handles = _resolve(objs, operation)
        on_gpu = [array_module_of(a) is not np for a in arrays]
        device = nccl and self._nccl is not None and all(on_gpu)
        direct_gpu = any(on_gpu) and not device and self._cuda_aware_mpi
        if any(on_gpu) and not device:
            self._warn_slower_gpu_path(direct_gpu)
        plan = mpi.Plan(objs, arrays, handles, self.segment_bytes, self.bucket_bytes, device,
                        direct_gpu)
        self._plans[key] = plan
        if len(self._plans) > _PLAN_CACHE_SIZE:
            self._plans.popitem(last=False)
        return plan

    def _agree(self, g: _Group, call: Call) -> bool:
        if not self.check_agreement:
            return True
        return agreement.agree(g, call, self._wait,
                               lambda: self._describe(call.operation, g) + ", agreement check")

    def _collective(self, g: _Group, operation: str, request) -> None:
        self.collectives_issued += 1
        self._wait([request], lambda: self._describe(operation, g))

    def _pipeline(self, g: _Group, operation: str, root: int, division: bool, device: bool):
        """The pipeline for one operation: NCCL for a device plan, else MPI."""
        if not device:
            return mpi.Pipeline(self, g, operation, root, division)
        nccl_group = self._nccl_groups.get(g.name)
        if nccl_group is None:  # made on first use, by every member at the same call
            require_cupy().cuda.Device(int(self.ctx.device_id)).use()
            nccl_group = self._nccl_groups[g.name] = NcclGroup(
                self._nccl, g, self._wait, lambda: self._describe("NCCL set-up", g))
        return NcclPipeline(self, self._nccl, nccl_group, g, operation, root, division)

    def _run_pipeline(self, step, pipeline) -> None:
        """Run ``step`` (a pipeline's pump or drain).  Once data collectives are under
        way, any failure (an interrupt while packing, too) leaves the ranks out of
        step: the communicator is then broken, and keeps the pending requests."""
        try:
            step()
        except BaseException as e:
            self._break(e, pipeline.pending_requests())
            raise

    def _wait(self, requests: list, what) -> None:
        """Wait for MPI ``requests``; a failure marks the communicator broken."""
        try:
            wait_all(requests, self.timeout, what)
        except CommunicatorError as e:
            self._break(e, requests)
            raise

    def _wait_until(self, done, what) -> None:
        """Wait until ``done()``; a failure marks the communicator broken."""
        try:
            wait_until(done, self.timeout, what)
        except CommunicatorError as e:
            self._break(e, [])
            raise

    def _break(self, error: BaseException, requests: list) -> None:
        self._abandoned.extend(requests)
        if self._broken is None:
            self._broken = str(error) or type(error).__name__

    def _describe(self, operation: str, g: _Group) -> str:
        return (f"{operation} on group {g.name!r} (rank {g.rank} of {g.size} in the group, "
                f"world rank {self.rank})")

    def _check_usable(self) -> None:
        if self._broken is not None:
            raise CommunicatorError(
                f"this communicator is broken: an earlier collective failed ({self._broken}). "
                "Its ranks are out of step and cannot be matched up again: restart the engines "
                "(e.g. `%dpnb restart` or cluster.restart()) and create a new communicator")

    def _world(self) -> _Group:
        world = self._groups.get("world")
        if world is None:
            raise DpnbError("the communicator is not initialised: call comm.init() first")
        return world

    def _member_group(self, name: str, operation: str) -> _Group:
        self._world()
        g = self._groups.get(name)
        if g is None:
            raise DpnbError(f"{operation}: no group named {name!r}; known groups: "
                            f"{sorted(self._groups)} (create one with "
                            "comm.new_group((name, ranks)))")
        if g.comm is None:
            raise DpnbError(f"{operation}: this process (rank {self.rank}) is not a member of "
                            f"group {name!r} (ranks {g.ranks}); call collectives on a group only "
                            "from its members")
        return g

    def _warn_slower_gpu_path(self, cuda_aware: bool) -> None:
        if not self._warned_gpu_path:
            self._warned_gpu_path = True
            path = ("CUDA-aware MPI" if cuda_aware
                    else "host memory over MPI (the MPI library is not CUDA-aware)")
            logger.warning(f"the communicator moves these GPU arrays through {path}, which is "
                           "slower than NCCL: NCCL needs a GPU context "
                           "(get_extension_context('cudnn')), CuPy with NCCL, and every array "
                           "of a call on the GPU")


MultiProcessDataParallelCommunicator = MultiProcessCommunicator
MultiProcessDataParalellCommunicator = MultiProcessCommunicator  # nnabla's own spelling too


def _as_list(data, operation: str, argument: str = "data") -> list:
    objs = list(data) if isinstance(data, (list, tuple)) else [data]
    if not objs:
        raise DpnbError(f"{operation}: {argument} is an empty list; pass at least one "
                        "NdArray or array")
    return objs


def _resolve(objs: list, operation: str) -> tuple[list, list]:
    """The backing arrays of ``objs`` and their NdArray handles (None for plain
    arrays), checked: supported dtype, C-contiguous, writable."""
    arrays, handles = [], []
    for i, obj in enumerate(objs):
        if isinstance(obj, NdArray):
            handle, array = obj, obj.data
        elif isinstance(obj, Variable):
            raise DpnbError(f"{operation}: item {i} is a Variable; pass its gradient or data "
                            "handle (x.grad or x.data)")
        elif isinstance(obj, np.ndarray) or (hasattr(obj, "__cuda_array_interface__")
                                             and array_module_of(obj) is not np):
            handle, array = None, obj
        else:
            raise DpnbError(f"{operation}: item {i} is a {type(obj).__name__}; expected an "
                            "NdArray (e.g. x.grad) or a NumPy/CuPy array")
        if array.dtype not in mpi.STAGE_DTYPES:
            raise DpnbError(f"{operation}: item {i} has dtype {array.dtype}; supported are "
                            f"{', '.join(str(d) for d in mpi.STAGE_DTYPES)}")
        if not array.flags.c_contiguous:
            raise DpnbError(f"{operation}: item {i} (shape {tuple(array.shape)}) is not "
                            "C-contiguous (a transposed or strided view), so the result cannot "
                            "be written back into it; pass the array it was taken from, or a "
                            "contiguous copy (np.ascontiguousarray) and copy the result back")
        if isinstance(array, np.ndarray) and not array.flags.writeable:
            raise DpnbError(f"{operation}: item {i} is read-only; the result is written back "
                            "into the given arrays, so pass writable ones")
        arrays.append(array)
        handles.append(handle)
    return arrays, handles


def _require_float(operation: str, arrays: list) -> None:
    for i, a in enumerate(arrays):
        if a.dtype.kind != "f":
            raise DpnbError(f"{operation}: division=True needs floating-point arrays, but item "
                            f"{i} has dtype {a.dtype}; gradients must be float (cast the array, "
                            "or sum without division)")


def _check_list_matches(operation: str, arrays: list, single, g: _Group,
                        list_name: str, single_name: str) -> None:
    if len(arrays) != g.size:
        raise DpnbError(f"{operation}: {list_name} must hold one array per rank of group "
                        f"{g.name!r} ({g.size}), got {len(arrays)}")
    for i, a in enumerate(arrays):
        if tuple(a.shape) != tuple(single.shape) or a.dtype != single.dtype:
            raise DpnbError(f"{operation}: {list_name}[{i}] is {a.dtype}{list(a.shape)} but "
                            f"{single_name} is {single.dtype}{list(single.shape)}; they must match")


def _host(array) -> np.ndarray:
    return to_module(array, np)


def _write(target, value: np.ndarray, divisor) -> None:
    """Store a host result into ``target`` (NumPy or CuPy), dividing if asked."""
    if divisor is not None:
        value = value / divisor
    target[...] = to_module(value.astype(target.dtype, copy=False), array_module_of(target))
