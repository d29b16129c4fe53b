"""The machinery every data collective of a communicator goes through: plans
(cached by what identifies an exchange), the agreement check, the transports
(MPI, NCCL) and the guard that waits and marks the communicator broken.

The communicator's nnabla methods and the gradient reducer both use it, so
neither reaches into the other."""
from __future__ import annotations

import collections
import dataclasses
import logging
import operator
import threading

import numpy as np

from ..context import array_module_of
from ..errors import (
    CommunicatorError,
    CommunicatorInterrupted,
    DpnbError,
    RankArgumentError,
)
from ..graph import Variable
from ..ndarray import NdArray
from . import agreement
from .agreement import Call, Channel
from .carried import Carried, carried_bytes
from .collective import Collective
from .mpi import MpiTransport
from .plan import STAGE_DTYPES, Plan, Stager, pieces_of_list
from .standoff import Watch
from .wait import Guard, quickly

logger = logging.getLogger("dpnb.communicators")

PLAN_CACHE_SIZE = 256     # prepared exchanges kept, one per list of arrays
PLAN_CACHE_BYTES = 256 << 20  # plain arrays the cache may keep alive, at most
_DATA = operator.attrgetter("data")
_UNHASHABLE = object()  # a list of objects that cannot be a cache key themselves
_KEEP_DTYPE = object()  # leads the cache key of an exchange that keeps its arrays' types


@dataclasses.dataclass
class Group:
    """A named set of world ranks and, on its members, their MPI communicator and
    the channel of its agreement check."""

    name: str
    ranks: list[int]
    comm: object | None  # None on ranks outside the group
    rank: int = -1       # this process's rank within the group
    channel: Channel | None = None

    def __post_init__(self):
        if self.comm is not None:
            self.rank = self.comm.Get_rank()
            self.channel = Channel(self.comm, self.size)

    @property
    def size(self) -> int:
        return len(self.ranks)


class Route:
    """How this rank runs one collective on one plan, settled on first use: its part
    (``Collective``), the agreement check's ``Call``, the carried form where the
    data are small (carried.py), and a pipeline of the plan's transport, loaded
    anew at each run.  Making it sends nothing, so it is made before the check."""

    def __init__(self, exchange: "Exchange", group: Group, plan: Plan, operation: str,
                 root: int, division: bool):
        self.collective = Collective.of(operation, group.rank, group.size, root, division)
        self.call = plan.call(operation, group.name, root, division)
        self.what = lambda: exchange.describe(operation, group)
        self.what_check = lambda: self.what() + ", agreement check"
        self.carried = (Carried(plan, group, self.collective, division, self.what)
                        if carried_bytes(plan) is not None else None)
        self.pipeline = exchange.pipeline(group, self.collective, plan.device)


class ListSource:
    """The items of a caller's list, and how to tell that they are still where a
    plan found them: flat storage moves when it grows (rebinding every handle into
    it), other handles may be rebound one by one.  With ``widen`` (the
    communicator's float type), float handles of a narrower type are cast to it
    first, as nnabla's collectives cast every array to the communicator's type."""

    def __init__(self, objs: list, operation: str, widen: np.dtype | None):
        self.objs = objs  # held, so that the ids in the cache key stay theirs
        self.widen = widen
        self.arrays, self.handles = resolve(objs, operation)
        self._watched: list = []  # handles whose rebinding means the plan is stale
        self._bound: list = []    # the arrays they were bound to then

    def pieces(self) -> list:
        if self.widen is not None:
            for h in self.handles:
                if h is not None and narrower(h.dtype, self.widen) and not h.pinned:
                    h.cast(self.widen)
        self.arrays = [h.data if h is not None else a for a, h in zip(self.arrays, self.handles)]
        pieces = pieces_of_list(self.arrays, self.handles)
        one_per_buffer = {p.buffer: p.handle for p in pieces if p.buffer is not None}
        self._watched = list(one_per_buffer.values()) + [
            p.handle for p in pieces if p.buffer is None and p.handle is not None]
        self._bound = [h.data for h in self._watched]
        return pieces

    def moved(self) -> bool:
        """Whether any item's memory moved since ``pieces()``."""
        return bool(self._watched) and not all(map(operator.is_, map(_DATA, self._watched),
                                                   self._bound))


class Prepared:
    """The plan for one source of arrays, made again (once) when they move."""

    def __init__(self, exchange: "Exchange", source, nccl: bool = True):
        self.exchange = exchange
        self.source = source
        self.nccl = nccl
        self._plan: Plan | None = None
        self._sizes = None  # the exchange's ``sizes`` the plan was made with

    def plan(self) -> Plan:
        exchange = self.exchange
        if (self._plan is not None and self._sizes is exchange.sizes
                and not self.source.moved()):
            return self._plan
        self._plan = exchange.build_plan(self.source.pieces(), self.nccl)
        self._sizes = exchange.sizes
        return self._plan


class Exchange:
    """Plans, agreement, transports and waiting for one communicator.

    ``collectives_issued`` counts the data collectives handed to a transport and
    ``plans_built`` the plans made (a cache miss, or arrays that moved)."""

    def __init__(self, timeout: float, check_agreement: bool, segment_bytes: int,
                 bucket_bytes: int, dtype=np.float32):
        self.guard = Guard(timeout)
        self.dtype = np.dtype(dtype)  # the communicator's float type (its context's)
        self.check_agreement = check_agreement
        self.sizes = (segment_bytes, bucket_bytes)
        self.stager = Stager()
        self.collectives_issued = 0
        self.plans_built = 0
        self.world_rank = -1
        self.groups: dict[str, Group] = {}  # every known group by name: the communicator's
        self.mpi = MpiTransport(self)
        self.nccl = None          # an NcclTransport, for a GPU context where NCCL is available
        self.cuda_aware_mpi = False
        self._warned_gpu_path = False
        self._prepared: collections.OrderedDict = collections.OrderedDict()
        self._last: Prepared | None = None  # the most recently used, already at the end
        self._prepared_bytes = 0

    @property
    def segment_bytes(self) -> int:
        return self.sizes[0]

    @segment_bytes.setter
    def segment_bytes(self, value: int) -> None:
        self.sizes = (value, self.sizes[1])  # a new tuple: plans made before are stale

    @property
    def bucket_bytes(self) -> int:
        return self.sizes[1]

    @bucket_bytes.setter
    def bucket_bytes(self, value: int) -> None:
        self.sizes = (self.sizes[0], value)

    # -- plans ------------------------------------------------------------------
    def build_plan(self, pieces: list, nccl: bool = True) -> Plan:
        """A plan for ``pieces``: for NCCL where ``nccl`` allows, NCCL is in use and
        every array is on the GPU."""
        on_gpu = [not isinstance(p.view, np.ndarray) for p in pieces]
        device = nccl and self.nccl is not None and all(on_gpu)
        direct_gpu = any(on_gpu) and not device and self.cuda_aware_mpi
        if any(on_gpu) and not device:
            self.warn_slower_gpu_path("CUDA-aware MPI" if direct_gpu else
                                      "host memory over MPI (the MPI library is not CUDA-aware)")
        self.plans_built += 1
        return Plan(pieces, self.segment_bytes, self.bucket_bytes, device, direct_gpu)

    def prepared(self, objs: tuple, operation: str, keep_dtype: bool = False) -> Prepared:
        """The cached exchange of exactly these objects (held by the cache, so their
        ids cannot be reused); made, with its arguments checked, on first use.  Float
        handles narrower than ``dtype`` are cast to it, unless ``keep_dtype``."""
        found = _UNHASHABLE
        tag = (_KEEP_DTYPE,) if keep_dtype else ()
        if isinstance(objs[0], NdArray):
            key = tag + objs
            try:  # NdArray handles hash and compare by identity, in C: no id() per item
                found = self._prepared.get(key)
            except TypeError:  # plain arrays among them
                pass
        if found is _UNHASHABLE:  # arrays cannot be hashed (nor compared as keys): their ids
            key = tag + tuple(map(id, objs))
            found = self._prepared.get(key)
        if found is not None:
            if found is not self._last:
                self._prepared.move_to_end(key)
                self._last = found
            return found
        found = self._prepared[key] = self._last = Prepared(
            self, ListSource(objs, operation, None if keep_dtype else self.dtype))
        self._prepared_bytes += _plain_bytes(found.source)
        while len(self._prepared) > 1 and (len(self._prepared) > PLAN_CACHE_SIZE
                                           or self._prepared_bytes > PLAN_CACHE_BYTES):
            _, dropped = self._prepared.popitem(last=False)
            self._prepared_bytes -= _plain_bytes(dropped.source)
        return found

    # -- running ------------------------------------------------------------------
    def agree(self, group: Group, call: Call, always: bool = False) -> bool:
        """Whether the ranks' memory layouts agree too; raises on any other mismatch.
        Skipped where ``check_agreement`` is off, unless ``always``."""
        if not (self.check_agreement or always):
            return True
        return agreement.agree(group, call, self.wait_agreement,
                               lambda: self.describe(call.operation, group) + ", agreement check")

    def refuse(self, group: Group, operation: str, error: Exception,
               always: bool = False) -> None:
        """This rank cannot make ``operation`` on ``group``: its own arguments failed
        their checks (``error``).  It still takes part in the agreement check, so that
        every rank of the group raises ``RankArgumentError`` at once instead of waiting;
        raises it here (from ``error``).  Without the check (``check_agreement`` off and
        not ``always``) it returns, and the caller raises ``error`` itself."""
        if not (self.check_agreement or always):
            return
        self.guard.enter(operation, group)
        try:
            self.agree(group, agreement.refusal(operation, group.name, error), always)
        except RankArgumentError as e:
            raise e from error

    def wait_agreement(self, request, what, meanwhile=None) -> None:
        """Wait for a request of an agreement check, after ``meanwhile()`` (if given,
        local work done while the check travels): tests in a tight loop first (a
        check takes microseconds where every rank is there), then polls, within the
        timeout and interruptibly, reading the board now and then for ranks caught
        waiting for each other in different groups (standoff.py; only where every
        collective starts with the check, so that none completes before every rank of
        its group has entered it).  Any failure marks the communicator broken: the
        request stays posted."""
        try:
            if meanwhile is not None:
                meanwhile()
            if quickly(request.Test):
                return
            guard = self.guard
            board = guard.board if self.check_agreement else None
            guard.wait_until(Watch(request, board, self.groups, what), what, [request])
        except BaseException as e:  # noqa: BLE001 - any failure leaves the request posted
            raise self._broken_by(e, [request], what)

    def pipeline(self, group: Group, collective: Collective, device: bool):
        """A pipeline of the transport for a plan: NCCL for a device plan, else MPI."""
        return (self.nccl if device else self.mpi).pipeline(group, collective)

    def execute(self, group: Group, plan: Plan, operation: str, root: int,
                division: bool) -> None:
        """Run ``operation`` on the arrays of ``plan`` after the agreement check (small
        data travel with the check itself: carried.py); the first chunk is packed while
        the check's rows travel."""
        key = (operation, group.name, root, division)
        route = plan.transport.get(key)
        if route is None:
            route = plan.transport[key] = Route(self, group, plan, operation, root, division)
        self.guard.enter(operation, group)
        if not self.check_agreement:
            pipeline = route.pipeline.load(plan.chunks)
        elif route.carried is not None:
            self.collectives_issued += 1
            route.carried.run(self.wait_agreement)
            return
        else:
            pipeline = route.pipeline.load(plan.chunks)
            if not agreement.agree(group, route.call, self.wait_agreement, route.what_check,
                                   pipeline.prepare):
                pipeline = self.pipeline(group, route.collective, plan.device).load(
                    plan.canonical())  # the memory layouts differ between ranks
        self.guard.run(pipeline.drain, pipeline.pending_requests)

    def group_comm(self, world: Group, ranks: list[int], name: str):
        """The MPI communicator of world ``ranks`` (this rank among them), for group
        ``name``.  MPI makes it in a blocking call, so a helper thread makes the call
        while this one waits within the timeout and interruptibly: a member that
        never joins leaves the thread blocked and the communicator broken, not a hang.
        (Where MPI was started for one thread only, this thread makes the call.)"""
        from mpi4py import MPI

        world_group = world.comm.Get_group()
        mpi_group = world_group.Incl(ranks)
        world_group.Free()
        made: dict = {}

        def create() -> None:
            try:
                made["comm"] = world.comm.Create_group(mpi_group)
            except Exception as e:  # noqa: BLE001 - raised in the waiting thread
                made["error"] = e
            finally:
                mpi_group.Free()

        def what() -> str:
            return f"new_group {name!r} (world rank {self.world_rank}), making its communicator"

        if MPI.Query_thread() < MPI.THREAD_SERIALIZED:
            create()
        else:
            self._in_thread(create, f"dpnb new_group {name!r}", what)
        if "error" in made:
            raise made["error"]
        return made["comm"]

    def _in_thread(self, call, name: str, what) -> None:
        """Run the blocking ``call()`` in a helper thread while this one waits for it."""
        thread = threading.Thread(target=call, name=name, daemon=True)
        thread.start()
        try:
            self.guard.wait_until(lambda: not thread.is_alive(), what)
        except BaseException as e:  # noqa: BLE001 - any failure leaves the thread waiting
            raise self._broken_by(e, [], what)

    def _broken_by(self, error: BaseException, requests: list, what) -> BaseException:
        """What a wait that failed with ``error`` raises (an interrupt as
        ``CommunicatorInterrupted``), once the communicator is marked broken by it."""
        if isinstance(error, CommunicatorError):
            return error  # the guard has marked it
        if isinstance(error, KeyboardInterrupt):
            error = CommunicatorInterrupted(f"{what()}: interrupted while waiting for the "
                                            "other ranks")
        self.guard.mark_broken(error, requests)
        return error

    def wait(self, group: Group, operation: str, request) -> None:
        """Wait for one data collective issued outside a pipeline."""
        self.collectives_issued += 1
        self.guard.wait([request], lambda: self.describe(operation, group))

    def describe(self, operation: str, group: Group) -> str:
        return (f"{operation} on group {group.name!r} (rank {group.rank} of {group.size} in "
                f"the group, world rank {self.world_rank})")

    def warn_slower_gpu_path(self, path: str) -> None:
        """Say once which slower path GPU arrays take."""
        if not self._warned_gpu_path:
            self._warned_gpu_path = True
            logger.warning(f"the communicator moves these GPU arrays through {path}, which is "
                           "slower than NCCL: NCCL needs a GPU context "
                           "(get_extension_context('cudnn')), CuPy with NCCL, and every array "
                           "of a call on the GPU")


def _plain_bytes(source: ListSource) -> int:
    return sum(a.nbytes for a, h in zip(source.arrays, source.handles) if h is None)


def narrower(dtype: np.dtype, than: np.dtype) -> bool:
    """Whether ``dtype`` is a float type with fewer bits than ``than``."""
    return dtype.kind == "f" and dtype.itemsize < than.itemsize


def resolve(objs: list, operation: str) -> tuple[list, list]:
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
        if array.dtype not in STAGE_DTYPES:
            raise DpnbError(f"{operation}: item {i} has dtype {array.dtype}; supported are "
                            f"{', '.join(str(d) for d in STAGE_DTYPES)}")
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


def require_float(operation: str, arrays: list) -> None:
    """Refuse ``division=True`` over arrays that are not floating point."""
    for i, a in enumerate(arrays):
        if a.dtype.kind != "f":
            raise DpnbError(f"{operation}: division=True needs floating-point arrays, but item "
                            f"{i} has dtype {a.dtype}; gradients must be float (cast the array, "
                            "or sum without division)")
