"""``MultiProcessCommunicator``: nnabla's multi-process data-parallel
communicator, one process per device, over MPI (mpi4py) and, for GPU arrays
in a GPU context, NCCL.

Every collective first checks its arguments here (a rank whose check fails
tells the others through the agreement check, so that all raise), then goes
through the communicator's ``Exchange``, made by ``init``: a cached plan, the
agreement check with the other ranks, a transport (MPI or NCCL) and the guard
that waits interruptibly with a timeout (all in ``_internal``).  A collective
that times out or is interrupted leaves the ranks out of step, so the
communicator is then marked broken and refuses further use.  Gradients have
one owner, the reducer (reducer.py).  Settings come from the environment once
(settings.py) and change through the properties."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from ..context import Context, array_module_of, get_current_context, require_cupy, to_module
from ..errors import DpnbError
from ..parameter import get_parameters
from ._internal.agreement import Call
from ._internal.exchange import CachedPlan, Exchange, Group
from ._internal.mpi import MpiTransport, cuda_aware_mpi
from ._internal.nccl import NcclTransport, nccl_module
from ._internal.plan import STAGE_DTYPES, require_float, resolve
from ._internal.status_board import StatusBoard
from ._internal.wait import Guard
from .reducer import DEFAULT_PACK_SIZE, GradientReducer, SolverSource
from .settings import HOSTS_SEGMENT_BYTES, from_environment, positive_bytes, positive_seconds

_NOT_INITIALISED = "the communicator is not initialised: call comm.init() first"


class MultiProcessCommunicator:
    """Collectives between the processes of an MPI job, one process per device.

    Also ``MultiProcessDataParallelCommunicator`` (and nnabla's misspelt
    ``MultiProcessDataParalellCommunicator``).  Call ``init()`` on every rank before
    the first collective.

    Properties tune it (set them the same on every rank): ``timeout``,
    ``stall_seconds``, ``check_agreement``, ``use_nccl`` (read by ``init``),
    ``segment_bytes`` and ``bucket_bytes``; their defaults come from the
    ``DPNB_COMM_*`` environment variables (the table in
    ``dpnb.communicators.settings``).  ``collectives_issued`` counts the data
    collectives sent, ``plans_built`` the schedules made.

    Parameters
    ----------
    ctx : Context, optional
        The context whose device the rank uses (``init`` sets its ``device_id`` to
        the local rank) and whose type collectives cast narrower floats to.
        Default: the current context.

    Examples
    --------
    >>> comm = C.MultiProcessCommunicator(ctx)                   # doctest: +SKIP
    >>> comm.init()                                              # doctest: +SKIP
    >>> comm.all_reduce([p.grad for p in nn.get_parameters().values()],
    ...                 division=True)                            # doctest: +SKIP
    """

    def __init__(self, ctx: Context | None = None):
        self.ctx = ctx if ctx is not None else get_current_context()
        self._settings = from_environment()
        self._groups: dict[str, Group] = {}
        self._local_rank = -1
        self._exchange: Exchange | None = None  # made by ``init``

    # -- set-up ---------------------------------------------------------------
    def init(self) -> None:
        """Join the MPI job: learn size, rank and local rank, and set
        ``ctx.device_id`` to the local rank (one device per process on a host).

        Collective: every rank of the job calls it.  A second call does nothing.

        Raises
        ------
        DpnbError
            Where mpi4py or an MPI library is missing (the message says what to
            install).
        """
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
        if local.Get_size() < world.Get_size() and not self._settings.segment_bytes_chosen:
            # every rank finds the same
            self._settings = dataclasses.replace(self._settings,
                                                 segment_bytes=HOSTS_SEGMENT_BYTES)
        local.Free()
        world_group = Group("world", list(range(world.Get_size())), world)
        guard = Guard(self._settings, StatusBoard(world, self._groups))
        self.ctx.device_id = str(self._local_rank)
        nccl, cuda_aware = None, False
        if self.ctx.is_gpu:
            # ranks beyond the host's GPU count share devices (NCCL then refuses: turn it off)
            device = self._local_rank % require_cupy().cuda.runtime.getDeviceCount()
            self.ctx.device_id = str(device)
            module = nccl_module() if self._settings.use_nccl else None
            if module is not None:
                nccl = NcclTransport(guard, module, device)
            cuda_aware = cuda_aware_mpi(world)
        self._exchange = Exchange(self._settings, guard, MpiTransport(guard), nccl, cuda_aware,
                                  self.ctx.dtype)
        self._groups["world"] = world_group

    def _configure(self, **changes) -> None:
        """Replace settings (a property set at run time), for the exchange too."""
        self._settings = dataclasses.replace(self._settings, **changes)
        if self._exchange is not None:
            self._exchange.use(self._settings)

    @property
    def timeout(self) -> float:
        """Seconds a collective may wait for the other ranks before failing."""
        return self._settings.timeout

    @timeout.setter
    def timeout(self, seconds: float) -> None:
        self._configure(timeout=positive_seconds("comm.timeout", seconds))

    @property
    def stall_seconds(self) -> float:
        """Seconds a collective waits for the other ranks before it reports who is late
        (once per collective; never where it is not below the timeout)."""
        return self._settings.stall_seconds

    @stall_seconds.setter
    def stall_seconds(self, seconds: float) -> None:
        self._configure(stall_seconds=positive_seconds("comm.stall_seconds", seconds))

    @property
    def check_agreement(self) -> bool:
        """Whether the ranks compare each call before the data moves."""
        return self._settings.check_agreement

    @check_agreement.setter
    def check_agreement(self, on: bool) -> None:
        self._configure(check_agreement=bool(on))

    @property
    def use_nccl(self) -> bool:
        """Whether ``init`` sets up NCCL for GPU arrays (where CuPy has it)."""
        return self._settings.use_nccl

    @use_nccl.setter
    def use_nccl(self, on: bool) -> None:
        self._configure(use_nccl=bool(on))

    @property
    def segment_bytes(self) -> int:
        """Bytes per collective of a long stretch reduced in place."""
        return self._settings.segment_bytes

    @segment_bytes.setter
    def segment_bytes(self, value: int) -> None:
        self._configure(segment_bytes=positive_bytes("comm.segment_bytes", value),
                        segment_bytes_chosen=True)

    @property
    def bucket_bytes(self) -> int:
        """Bytes of a staging bucket for small arrays."""
        return self._settings.bucket_bytes

    @bucket_bytes.setter
    def bucket_bytes(self, value: int) -> None:
        self._configure(bucket_bytes=positive_bytes("comm.bucket_bytes", value))

    @property
    def collectives_issued(self) -> int:
        """Data collectives sent so far (agreement checks not counted)."""
        return self._exchange.collectives_issued if self._exchange is not None else 0

    @property
    def plans_built(self) -> int:
        """Schedules made so far: on first use of a set of arrays, or after they moved."""
        return self._exchange.plans_built if self._exchange is not None else 0

    @property
    def uses_nccl(self) -> bool:
        """Whether GPU arrays go through NCCL (a GPU context with NCCL, ``use_nccl`` on)."""
        return self._exchange is not None and self._exchange.nccl is not None

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
        return self._exchange.staging_bytes if self._exchange is not None else 0

    # -- groups ---------------------------------------------------------------
    def new_group(self, name_ranks: tuple[str, list[int]]) -> str:
        """Create group ``name`` of the given world ranks (group rank i is
        ``ranks[i]``); returns its name.  Every rank of the world calls it with the
        same name and ranks (as nnabla programs do, so that every rank knows every
        group), and the ranks agree on the call first: different names or ranks, or
        a rank in another collective, raise on every rank.  Every wait is bounded by
        the timeout and interruptible."""
        operation = "new_group"
        exchange = self._usable()
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
        it grows, and the solver when its parameters change.

        Parameters
        ----------
        solver : dpnb solver
            A solver with its parameters set (``solver.set_parameters(...)``).
        division : bool
            Average (True, the default) or sum the gradients over the group.
        pack_size : int
            Elements per pack sent while backward runs (default 2 << 20, as
            nnabla's ``get_all_reduce_callback``).
        group : str
            The group to reduce over (``new_group``); default ``"world"``.

        Returns
        -------
        GradientReducer
            Callable as a communicator callback; ``all_reduce()`` after backward.
        """
        operation = "gradient_reducer"
        exchange = self._usable()
        g = self._member_group(group, operation)
        if not hasattr(solver, "runs"):
            raise DpnbError(f"{operation} expects a dpnb solver (e.g. S.Adam()), got "
                            f"{type(solver).__name__}; for a list of gradients use "
                            "comm.all_reduce_callback(grads, pack_size)")
        return GradientReducer(exchange, g, CachedPlan(exchange, SolverSource(solver)),
                               division, pack_size, operation)

    def all_reduce_callback(self, data, pack_size: int, division: bool = False,
                            group: str = "world", scale_grad: float = 1,
                            keep_dtype: bool = False) -> GradientReducer:
        """A callback for ``loss.backward(communicator_callbacks=...)`` that
        all-reduces ``data`` while backward runs, each pack as soon as all of its
        gradients are complete.

        Parameters
        ----------
        data : list of NdArray
            The gradients to reduce (e.g. ``[p.grad for p in params]``).
        pack_size : int
            Elements per pack, above 0.
        division : bool
            Average instead of sum.
        group : str
            The group (``new_group``); default ``"world"``.
        scale_grad : float
            Each gradient is multiplied by it first (to cancel a loss scale, as in
            nnabla).
        keep_dtype : bool
            Keep gradients of a narrower float type in their own type (for mixed
            precision, and for narrowed arrays, which cannot be cast); by default
            they end in the communicator's, as nnabla's do.  They are summed in at
            least float32 either way.

        Returns
        -------
        GradientReducer
            The callback; also ``all_reduce()`` after backward.
        """
        operation = "all_reduce_callback"
        exchange = self._usable()
        g = self._member_group(group, operation)
        if int(pack_size) <= 0:
            raise DpnbError(f"{operation}: pack_size must be a positive number of elements, "
                            f"got {pack_size}")
        cached = exchange.cached_plan(_as_list(data, operation), operation, keep_dtype)
        return GradientReducer(exchange, g, cached, division, pack_size, operation, scale_grad)

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
        """Sum ``data`` over the group, in place on every rank.

        NdArrays of a narrower float type than the communicator's are cast to it
        first, as in nnabla (every collective here does so).

        Parameters
        ----------
        data : NdArray, numpy.ndarray, cupy.ndarray, or a list of them
            The arrays to reduce; the results are written back into them.
        division : bool
            Divide the sum by the group's size (the mean).
        inplace : bool
            Accepted for nnabla compatibility: dpnb always writes back in place and
            chooses the packing itself.
        group : str
            The group (``new_group``); default ``"world"``.

        Raises
        ------
        AgreementError
            Where the ranks' calls differ (operation, group, count, dtypes, shapes);
            every rank raises, instead of hanging.
        CommunicatorTimeout, CommunicatorInterrupted
            After ``timeout`` seconds, or on Ctrl-C / ipyparallel's interrupt; the
            communicator is then broken.
        """
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
        exchange = self._usable()
        g = self._member_group(group, operation)
        try:
            (source,), _ = resolve([ndarray], operation)
            targets, _ = resolve(_as_list(ndarray_list, operation, "ndarray_list"), operation)
            _check_list_matches(operation, targets, source, g, "ndarray_list", "ndarray")
        except Exception as e:
            exchange.refuse(g, operation, e)
            raise
        specs = [(a.dtype.str, tuple(a.shape)) for a in [source] + targets]
        exchange.guard.enter(operation, g)
        exchange.agree(g, Call(operation, g.name, specs))
        if self._through_nccl(exchange, [source] + targets):
            import cupy

            received = cupy.empty((g.size, source.size), source.dtype)
            exchange.nccl.all_gather(g, source.reshape(-1), received)
            for target, row in zip(targets, received):
                target[...] = row.reshape(target.shape)
            return
        stage = STAGE_DTYPES[source.dtype]
        send = _host(source).astype(stage, copy=False).reshape(-1)
        received = np.empty((g.size, send.size), stage)
        exchange.wait(g, operation, g.comm.Iallgather(send, received))
        for target, row in zip(targets, received):
            _write(target, row.reshape(target.shape), None)

    def reduce_scatter(self, ndarray_list: list, ndarray, division: bool = False,
                       group: str = "world") -> None:
        """``ndarray`` on group rank ``i`` receives the sum over ranks of their
        ``ndarray_list[i]`` (the mean with ``division=True``)."""
        operation = "reduce_scatter"
        exchange = self._usable()
        g = self._member_group(group, operation)
        try:
            sources, _ = resolve(_as_list(ndarray_list, operation, "ndarray_list"), operation)
            (target,), _ = resolve([ndarray], operation)
            _check_list_matches(operation, sources, target, g, "ndarray_list", "ndarray")
            if division:
                require_float(operation, [target])
        except Exception as e:
            exchange.refuse(g, operation, e)
            raise
        specs = [(a.dtype.str, tuple(a.shape)) for a in sources + [target]]
        exchange.guard.enter(operation, g)
        exchange.agree(g, Call(operation, g.name, specs, division=division))
        if self._through_nccl(exchange, sources + [target]):
            import cupy

            send = cupy.concatenate([a.reshape(-1) for a in sources])
            received = cupy.empty(target.size, target.dtype)
            averaged = exchange.nccl.reduce_scatter(g, send, received, division)
            if division and not averaged:
                received /= g.size
            target[...] = received.reshape(target.shape)
            return
        stage = STAGE_DTYPES[target.dtype]
        send = np.concatenate([_host(a).astype(stage, copy=False).reshape(-1) for a in sources])
        received = np.empty(target.size, stage)
        exchange.wait(g, operation, g.comm.Ireduce_scatter_block(send, received))
        _write(target, received.reshape(target.shape), g.size if division else None)

    def barrier(self) -> None:
        """Wait until every rank has reached this call (interruptibly, with the timeout)."""
        exchange = self._usable()
        g = self._member_group("world", "barrier")
        exchange.guard.enter("barrier", g)
        if self.check_agreement:
            exchange.agree(g, Call("barrier", g.name, []))
        else:
            exchange.guard.wait([g.comm.Ibarrier()], lambda: g.describe("barrier"))

    def abort(self) -> None:
        """End every process of the MPI job at once (``MPI_Abort``)."""
        from mpi4py import MPI

        MPI.COMM_WORLD.Abort(1)

    # -- internals ------------------------------------------------------------
    def _run(self, operation: str, data, group: str, root: int, division: bool) -> None:
        """All-reduce, reduce or broadcast through the cached plan of ``data``.  A
        rank whose arguments fail their checks tells the others (``Exchange.refuse``)."""
        exchange = self._usable()
        g = self._member_group(group, operation)
        try:
            if operation != "all_reduce" and (not isinstance(root, (int, np.integer))
                                              or not 0 <= root < g.size):
                role = "dst" if operation == "reduce" else "src"
                raise DpnbError(f"{operation}: {role}={root!r} is out of range; group {g.name!r} "
                                f"has ranks 0..{g.size - 1} (ranks within the group)")
            plan = exchange.cached_plan(_as_list(data, operation), operation).plan()
            if division and not plan.all_float:
                require_float(operation, plan.items)
        except Exception as e:
            exchange.refuse(g, operation, e)
            raise
        exchange.execute(g, plan, operation, int(root), division)

    def _through_nccl(self, exchange: Exchange, arrays: list) -> bool:
        """Whether NCCL takes these arrays (all on the GPU, NCCL in use); GPU arrays
        that cannot go that way are staged through the host, with a one-time warning."""
        on_gpu = [array_module_of(a) is not np for a in arrays]
        if all(on_gpu) and exchange.nccl is not None:
            return True
        if any(on_gpu):
            exchange.warn_slower_gpu_path("host memory over MPI")
        return False

    def _usable(self) -> Exchange:
        """The exchange, where ``init`` has made it and no collective broke it."""
        exchange = self._exchange
        if exchange is None:
            raise DpnbError(_NOT_INITIALISED)
        exchange.guard.check_usable()
        return exchange

    def _world(self) -> Group:
        world = self._groups.get("world")
        if world is None:
            raise DpnbError(_NOT_INITIALISED)
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
