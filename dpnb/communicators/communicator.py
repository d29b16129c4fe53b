"""``MultiProcessCommunicator``: nnabla's multi-process data-parallel
communicator, one process per device, over MPI (mpi4py) and, for GPU arrays
in a GPU context, NCCL.

Every collective first checks its arguments here (a rank whose check fails
tells the others through the agreement check, so that all raise), then goes
through the communicator's ``Exchange`` (exchange.py): a cached plan (plan.py),
the agreement check with the other ranks (agreement.py; ranks stuck in
different groups: standoff.py), a transport (mpi.py or nccl.py) and the guard
that waits interruptibly with a timeout (wait.py).  A
collective that times out or is interrupted leaves the ranks out of step, so
the communicator is then marked broken and refuses further use.  Gradients
have one owner, the reducer (reducer.py)."""
from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from ..context import Context, array_module_of, get_current_context, require_cupy, to_module
from ..errors import DpnbError
from ..parameter import get_parameters
from .agreement import Call
from .exchange import Exchange, Group, Prepared, require_float, resolve
from .mpi import cuda_aware_mpi
from .nccl import NcclTransport, nccl_module
from .plan import DEFAULT_BUCKET_BYTES, DEFAULT_SEGMENT_BYTES, HOSTS_SEGMENT_BYTES, STAGE_DTYPES
from .reducer import DEFAULT_PACK_SIZE, GradientReducer, SolverSource
from .board import Board
from .wait import stall_from_env, timeout_from_env


def _env_bytes(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return default if raw is None else _positive_bytes(name, raw)


def _positive_bytes(name: str, raw) -> int:
    try:
        value = int(raw)
    except (TypeError, ValueError):
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
    collective may wait; ``DPNB_COMM_TIMEOUT``, default 600), ``stall_seconds`` (how
    long it waits before printing which ranks are late; ``DPNB_COMM_STALL``, default
    30), ``check_agreement`` (``DPNB_COMM_CHECK``, default on), ``use_nccl``
    (``DPNB_COMM_NCCL``, default on; read by ``init``), ``segment_bytes``
    (``DPNB_COMM_SEGMENT_BYTES``; by default 2 MB, and 64 MB where ``init`` finds the
    ranks on more than one host) and ``bucket_bytes`` (``DPNB_COMM_BUCKET_BYTES``).
    ``collectives_issued`` counts the data collectives sent, ``plans_built`` the
    schedules made."""

    def __init__(self, ctx: Context | None = None):
        self.ctx = ctx if ctx is not None else get_current_context()
        self.use_nccl = _env_flag("DPNB_COMM_NCCL", True)
        self._exchange = Exchange(timeout_from_env(), _env_flag("DPNB_COMM_CHECK", True),
                                  _env_bytes("DPNB_COMM_SEGMENT_BYTES", DEFAULT_SEGMENT_BYTES),
                                  _env_bytes("DPNB_COMM_BUCKET_BYTES", DEFAULT_BUCKET_BYTES),
                                  self.ctx.dtype)
        self._exchange.guard.stall_seconds = stall_from_env()
        self._groups: dict[str, Group] = {}
        self._exchange.groups = self._groups
        self._local_rank = -1
        self._segment_bytes_chosen = "DPNB_COMM_SEGMENT_BYTES" in os.environ

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
        if local.Get_size() < world.Get_size() and not self._segment_bytes_chosen:
            self._exchange.segment_bytes = HOSTS_SEGMENT_BYTES  # every rank finds the same
        local.Free()
        self._groups["world"] = Group("world", list(range(world.Get_size())), world)
        self._exchange.world_rank = world.Get_rank()
        self._exchange.guard.attach(Board(world, self._groups))
        self.ctx.device_id = str(self._local_rank)
        if self.ctx.is_gpu:
            # ranks beyond the host's GPU count share devices (NCCL then refuses: turn it off)
            device = self._local_rank % require_cupy().cuda.runtime.getDeviceCount()
            self.ctx.device_id = str(device)
            nccl = nccl_module() if self.use_nccl else None
            if nccl is not None:
                self._exchange.nccl = NcclTransport(self._exchange, nccl, device)
            self._exchange.cuda_aware_mpi = cuda_aware_mpi(world)

    @property
    def timeout(self) -> float:
        """Seconds a collective may wait for the other ranks before failing."""
        return self._exchange.guard.timeout

    @timeout.setter
    def timeout(self, seconds: float) -> None:
        self._exchange.guard.timeout = seconds

    @property
    def stall_seconds(self) -> float:
        """Seconds a collective waits before it prints which ranks have not arrived."""
        return self._exchange.guard.stall_seconds

    @stall_seconds.setter
    def stall_seconds(self, seconds: float) -> None:
        self._exchange.guard.stall_seconds = seconds

    @property
    def check_agreement(self) -> bool:
        """Whether the ranks compare each call before the data moves."""
        return self._exchange.check_agreement

    @check_agreement.setter
    def check_agreement(self, on: bool) -> None:
        self._exchange.check_agreement = bool(on)

    @property
    def segment_bytes(self) -> int:
        """Bytes per collective of a long stretch reduced in place."""
        return self._exchange.segment_bytes

    @segment_bytes.setter
    def segment_bytes(self, value: int) -> None:
        self._exchange.segment_bytes = _positive_bytes("comm.segment_bytes", value)
        self._segment_bytes_chosen = True

    @property
    def bucket_bytes(self) -> int:
        """Bytes of a staging bucket for small arrays."""
        return self._exchange.bucket_bytes

    @bucket_bytes.setter
    def bucket_bytes(self, value: int) -> None:
        self._exchange.bucket_bytes = _positive_bytes("comm.bucket_bytes", value)

    @property
    def collectives_issued(self) -> int:
        """Data collectives sent so far (agreement checks not counted)."""
        return self._exchange.collectives_issued

    @property
    def plans_built(self) -> int:
        """Schedules made so far: on first use of a set of arrays, or after they moved."""
        return self._exchange.plans_built

    @property
    def uses_nccl(self) -> bool:
        """Whether GPU arrays go through NCCL (a GPU context with NCCL, ``use_nccl`` on)."""
        return self._exchange.nccl is not None

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
        return self._exchange.stager.nbytes

    # -- groups ---------------------------------------------------------------
    def new_group(self, name_ranks: tuple[str, list[int]]) -> str:
        """Create group ``name`` of the given world ranks (group rank i is
        ``ranks[i]``); returns its name.  Every rank of the world calls it with the
        same name and ranks (as nnabla programs do, so that every rank knows every
        group), and the ranks agree on the call first: different names or ranks, or
        a rank in another collective, raise on every rank.  Every wait is bounded by
        the timeout and interruptible."""
        operation = "new_group"
        exchange = self._exchange
        exchange.guard.check_usable()
        world = self._world()
        try:
            name, ranks = self._group_arguments(name_ranks, world)
        except Exception as e:
            exchange.refuse(world, operation, e, always=True)
            raise
        exchange.guard.enter(operation, world)
        exchange.agree(world, Call(operation, world.name, [], arguments=(name, tuple(ranks))),
                       always=True)
        comm = exchange.group_comm(world, ranks, name) if world.rank in ranks else None
        self._groups[name] = Group(name, ranks, comm)
        return name

    def _group_arguments(self, name_ranks, world: Group) -> tuple[str, list[int]]:
        """``new_group``'s (name, ranks), checked."""
        if not (isinstance(name_ranks, (tuple, list)) and len(name_ranks) == 2):
            raise DpnbError(f"new_group expects a (name, ranks) pair, got {name_ranks!r}")
        name, ranks = name_ranks
        if not isinstance(name, str) or not name:
            raise DpnbError(f"new_group needs a non-empty group name, got {name!r}")
        if name in self._groups:
            raise DpnbError(f"group {name!r} already exists with ranks {self._groups[name].ranks}; "
                            "choose another name")
        if not (isinstance(ranks, (tuple, list)) and ranks
                and all(isinstance(r, (int, np.integer)) for r in ranks)
                and len(set(ranks)) == len(ranks) and all(0 <= r < world.size for r in ranks)):
            raise DpnbError(f"new_group {name!r} needs a list of distinct ranks in "
                            f"0..{world.size - 1}, got {ranks!r}")
        return name, [int(r) for r in ranks]

    def list_groups(self) -> dict[str, list[int]]:
        """Every known group's world ranks, by name (``world`` included)."""
        self._world()
        return {name: list(g.ranks) for name, g in self._groups.items()}

    def find_group(self, group: str) -> list[int]:
        """The world ranks of ``group``, or an empty list if there is no such group."""
        self._world()
        g = self._groups.get(group)
        return list(g.ranks) if g is not None else []

    # -- gradient exchange ----------------------------------------------------
    def gradient_reducer(self, solver, division: bool = True,
                         pack_size: int = DEFAULT_PACK_SIZE,
                         group: str = "world") -> GradientReducer:
        """The exchange of ``solver``'s gradients, built from its runs of flat
        storage: ``reducer.all_reduce()`` after backward, or
        ``loss.backward(communicator_callbacks=reducer)`` to reduce packs of about
        ``pack_size`` elements while backward runs.  It follows the storage when
        it grows, and the solver when its parameters change."""
        operation = "gradient_reducer"
        self._exchange.guard.check_usable()
        g = self._member_group(group, operation)
        if not hasattr(solver, "runs"):
            raise DpnbError(f"{operation} expects a dpnb solver (e.g. S.Adam()), got "
                            f"{type(solver).__name__}; for a list of gradients use "
                            "comm.all_reduce_callback(grads, pack_size)")
        return GradientReducer(self._exchange, g, Prepared(self._exchange, SolverSource(solver)),
                               division, pack_size, operation)

    def all_reduce_callback(self, data, pack_size: int, division: bool = False,
                            group: str = "world", scale_grad: float = 1,
                            keep_dtype: bool = False) -> GradientReducer:
        """A callback for ``loss.backward(communicator_callbacks=...)`` that
        all-reduces ``data`` while backward runs, in packs of about ``pack_size``
        elements, each as soon as all of its gradients are complete; each gradient is
        multiplied by ``scale_grad`` first (to cancel a loss scale, as in nnabla).
        Gradients of a narrower float type end in the communicator's, as nnabla's,
        unless ``keep_dtype`` (for mixed precision, and for narrowed arrays, which
        cannot be cast); they are summed in at least float32 either way."""
        operation = "all_reduce_callback"
        self._exchange.guard.check_usable()
        g = self._member_group(group, operation)
        if int(pack_size) <= 0:
            raise DpnbError(f"{operation}: pack_size must be a positive number of elements, "
                            f"got {pack_size}")
        prepared = self._exchange.prepared(_as_list(data, operation), operation, keep_dtype)
        return GradientReducer(self._exchange, g, prepared, division, pack_size, operation,
                               scale_grad)

    def get_all_reduce_callback(self, params=None, pack_size: int = DEFAULT_PACK_SIZE,
                                division: bool = True, group: str = "world") -> GradientReducer:
        """``all_reduce_callback`` averaging the gradients of ``params`` (default: every
        trainable parameter, ``nn.get_parameters()``), the helper nnabla's examples use."""
        if params is None:
            params = get_parameters()
        grads = [p.grad for p in (params.values() if isinstance(params, Mapping) else params)]
        if not grads:
            raise DpnbError("get_all_reduce_callback: there are no parameters to reduce; build "
                            "the network before asking for the callback, or pass params=")
        return self.all_reduce_callback(grads, pack_size, division, group)

    # -- collectives ----------------------------------------------------------
    def all_reduce(self, data, division: bool = False, inplace: bool = False,
                   group: str = "world") -> None:
        """Sum ``data`` (an NdArray, array, or list of them) over the group, in place
        on every rank; ``division=True`` gives the mean.  ``inplace`` is accepted for
        nnabla compatibility: dpnb always writes back in place and chooses the
        packing itself.  NdArrays of a narrower float type than the communicator's
        are cast to it first, as in nnabla (every collective here does so)."""
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
        self._exchange.guard.check_usable()
        g = self._member_group(group, operation)
        try:
            (source,), _ = resolve([ndarray], operation)
            targets, _ = resolve(_as_list(ndarray_list, operation, "ndarray_list"), operation)
            _check_list_matches(operation, targets, source, g, "ndarray_list", "ndarray")
        except Exception as e:
            self._exchange.refuse(g, operation, e)
            raise
        specs = [(a.dtype.str, tuple(a.shape)) for a in [source] + targets]
        self._exchange.guard.enter(operation, g)
        self._exchange.agree(g, Call(operation, g.name, specs))
        if self._through_nccl([source] + targets):
            import cupy

            received = cupy.empty((g.size, source.size), source.dtype)
            self._exchange.nccl.all_gather(g, source.reshape(-1), received)
            for target, row in zip(targets, received):
                target[...] = row.reshape(target.shape)
            return
        stage = STAGE_DTYPES[source.dtype]
        send = _host(source).astype(stage, copy=False).reshape(-1)
        received = np.empty((g.size, send.size), stage)
        self._exchange.wait(g, operation, g.comm.Iallgather(send, received))
        for target, row in zip(targets, received):
            _write(target, row.reshape(target.shape), None)

    def reduce_scatter(self, ndarray_list: list, ndarray, division: bool = False,
                       group: str = "world") -> None:
        """``ndarray`` on group rank ``i`` receives the sum over ranks of their
        ``ndarray_list[i]`` (the mean with ``division=True``)."""
        operation = "reduce_scatter"
        self._exchange.guard.check_usable()
        g = self._member_group(group, operation)
        try:
            sources, _ = resolve(_as_list(ndarray_list, operation, "ndarray_list"), operation)
            (target,), _ = resolve([ndarray], operation)
            _check_list_matches(operation, sources, target, g, "ndarray_list", "ndarray")
            if division:
                require_float(operation, [target])
        except Exception as e:
            self._exchange.refuse(g, operation, e)
            raise
        specs = [(a.dtype.str, tuple(a.shape)) for a in sources + [target]]
        self._exchange.guard.enter(operation, g)
        self._exchange.agree(g, Call(operation, g.name, specs, division=division))
        if self._through_nccl(sources + [target]):
            import cupy

            send = cupy.concatenate([a.reshape(-1) for a in sources])
            received = cupy.empty(target.size, target.dtype)
            averaged = self._exchange.nccl.reduce_scatter(g, send, received, division)
            if division and not averaged:
                received /= g.size
            target[...] = received.reshape(target.shape)
            return
        stage = STAGE_DTYPES[target.dtype]
        send = np.concatenate([_host(a).astype(stage, copy=False).reshape(-1) for a in sources])
        received = np.empty(target.size, stage)
        self._exchange.wait(g, operation, g.comm.Ireduce_scatter_block(send, received))
        _write(target, received.reshape(target.shape), g.size if division else None)

    def barrier(self) -> None:
        """Wait until every rank has reached this call (interruptibly, with the timeout)."""
        self._exchange.guard.check_usable()
        g = self._member_group("world", "barrier")
        self._exchange.guard.enter("barrier", g)
        if self.check_agreement:
            self._exchange.agree(g, Call("barrier", g.name, []))
        else:
            self._exchange.guard.wait([g.comm.Ibarrier()],
                                      lambda: self._exchange.describe("barrier", g))

    def abort(self) -> None:
        """End every process of the MPI job at once (``MPI_Abort``)."""
        from mpi4py import MPI

        MPI.COMM_WORLD.Abort(1)

    # -- internals ------------------------------------------------------------
    def _run(self, operation: str, data, group: str, root: int, division: bool) -> None:
        """All-reduce, reduce or broadcast through the cached plan of ``data``.  A
        rank whose arguments fail their checks tells the others (``Exchange.refuse``)."""
        self._exchange.guard.check_usable()
        g = self._member_group(group, operation)
        try:
            if operation != "all_reduce" and (not isinstance(root, (int, np.integer))
                                              or not 0 <= root < g.size):
                role = "dst" if operation == "reduce" else "src"
                raise DpnbError(f"{operation}: {role}={root!r} is out of range; group {g.name!r} "
                                f"has ranks 0..{g.size - 1} (ranks within the group)")
            plan = self._exchange.prepared(_as_list(data, operation), operation).plan()
            if division and not plan.all_float:
                require_float(operation, plan.items)
        except Exception as e:
            self._exchange.refuse(g, operation, e)
            raise
        self._exchange.execute(g, plan, operation, int(root), division)

    def _through_nccl(self, arrays: list) -> bool:
        """Whether NCCL takes these arrays (all on the GPU, NCCL in use); GPU arrays
        that cannot go that way are staged through the host, with a one-time warning."""
        on_gpu = [array_module_of(a) is not np for a in arrays]
        if all(on_gpu) and self._exchange.nccl is not None:
            return True
        if any(on_gpu):
            self._exchange.warn_slower_gpu_path("host memory over MPI")
        return False

    def _world(self) -> Group:
        world = self._groups.get("world")
        if world is None:
            raise DpnbError("the communicator is not initialised: call comm.init() first")
        return world

    def _member_group(self, name: str, operation: str) -> Group:
        g = self._groups.get(name)
        if g is not None and g.comm is not None:
            return g
        self._world()
        if g is None:
            raise DpnbError(f"{operation}: no group named {name!r}; known groups: "
                            f"{sorted(self._groups)} (create one with "
                            "comm.new_group((name, ranks)))")
        if g.comm is None:
            raise DpnbError(f"{operation}: this process (rank {self.rank}) is not a member of "
                            f"group {name!r} (ranks {g.ranks}); call collectives on a group only "
                            "from its members")
        return g


MultiProcessDataParallelCommunicator = MultiProcessCommunicator
MultiProcessDataParalellCommunicator = MultiProcessCommunicator  # nnabla's own spelling too


def _as_list(data, operation: str, argument: str = "data") -> tuple:
    """``data`` (one item, or a list or tuple of them) as a tuple of items."""
    objs = tuple(data) if isinstance(data, (list, tuple)) else (data,)
    if not objs:
        raise DpnbError(f"{operation}: {argument} is an empty list; pass at least one "
                        "NdArray or array")
    return objs


def _check_list_matches(operation: str, arrays: list, single, g: Group,
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
