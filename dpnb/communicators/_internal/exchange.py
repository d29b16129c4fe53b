"""The machinery every data collective of a communicator goes through: plans
(cached by what identifies an exchange), the agreement check, the transports
(MPI, NCCL) and the guard that waits and marks the communicator broken.

The communicator's nnabla methods and the gradient reducer both use it, so
neither reaches into the other.  The communicator makes it in ``init``, with
everything it uses: its settings, its guard and its transports, which know
nothing of the exchange."""
from __future__ import annotations

import collections
import dataclasses
import logging
import threading

import numpy as np

from ...errors import RankArgumentError
from ...ndarray import NdArray
from . import agreement
from .agreement import Call, Channel, InlineCollective, inline_bytes
from .plan import Collective, ListSource, Plan

logger = logging.getLogger("dpnb.communicators")

PLAN_CACHE_SIZE = 256     # cached plans kept, one per list of arrays
PLAN_CACHE_BYTES = 256 << 20  # plain arrays the cache may keep alive, at most
_UNHASHABLE = object()  # a list of objects that cannot be a cache key themselves
_KEEP_DTYPE = object()  # leads the cache key of an exchange that keeps its arrays' types


@dataclasses.dataclass
class Group:
    """A named set of world ranks (group rank i is world rank ``ranks[i]``) and, on
    its members, their MPI communicator and the channel of its agreement check."""

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

    def describe(self, operation: str) -> str:
        """``operation`` on this group, as errors name it (on a member)."""
        return (f"{operation} on group {self.name!r} (rank {self.rank} of {self.size} in "
                f"the group, world rank {self.ranks[self.rank]})")


class CollectiveSetup:
    """How this rank runs one collective on one plan, settled on first use: its part
    (``Collective``), the agreement check's ``Call``, the inline form where the
    data are small (``InlineCollective``), and a pipeline of the plan's transport,
    loaded anew at each run.  Making it sends nothing, so it is made before the check."""

    def __init__(self, exchange: "Exchange", group: Group, plan: Plan, operation: str,
                 root: int, division: bool):
        self.collective = Collective.of(operation, group.rank, group.size, root, division)
        self.call = Call(operation, group.name, plan.specs, root, division, plan.bucket_bytes,
                         plan.layout, plan.specs_hash)
        self.what = lambda: group.describe(operation)
        self.what_check = lambda: self.what() + ", agreement check"
        self.inline = (InlineCollective(plan, group, self.collective, division, self.what)
                       if inline_bytes(plan) is not None else None)
        self.pipeline = exchange.pipeline(group, self.collective, plan.device)


class CachedPlan:
    """The plan for one source of arrays, made again (once) when they move or the
    exchange's sizes change."""

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

    Made with the communicator's ``settings`` (a ``Settings``), the ``guard`` that
    waits (a ``Guard``), the MPI transport, the NCCL transport (None where a GPU
    context has no NCCL, or not a GPU context), whether MPI is CUDA-aware, and the
    communicator's float type.  ``collectives_issued`` counts the data collectives
    issued and ``plans_built`` the plans made (a cache miss, or arrays that moved)."""

    def __init__(self, settings, guard, mpi, nccl=None, cuda_aware_mpi: bool = False,
                 dtype=np.float32):
        self.guard = guard
        self.mpi = mpi
        self.nccl = nccl
        self.cuda_aware_mpi = cuda_aware_mpi
        self.dtype = np.dtype(dtype)  # the communicator's float type (its context's)
        self.plans_built = 0
        self._issued = 0  # collectives issued outside the transports' pipelines
        self._warned_gpu_path = False
        self._cached: collections.OrderedDict = collections.OrderedDict()
        self._last: CachedPlan | None = None  # the most recently used, already at the end
        self._cached_bytes = 0
        self.sizes = None
        self.use(settings)

    def use(self, settings) -> None:
        """Work with ``settings`` from now on (the communicator's, changed at run time);
        plans made with other segment or bucket sizes are made again at their next use."""
        self.settings = settings
        self.check_agreement = settings.check_agreement
        sizes = (settings.segment_bytes, settings.bucket_bytes)
        if sizes != self.sizes:
            self.sizes = sizes
        self.guard.use(settings)

    @property
    def collectives_issued(self) -> int:
        return self._issued + self.mpi.issued + (self.nccl.issued if self.nccl else 0)

    @property
    def staging_bytes(self) -> int:
        return self.mpi.stager.nbytes

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
        segment_bytes, bucket_bytes = self.sizes
        return Plan(pieces, segment_bytes, bucket_bytes, device, direct_gpu)

    def cached_plan(self, objs: tuple, operation: str, keep_dtype: bool = False) -> CachedPlan:
        """The cached plan of exactly these objects (held by the cache, so their ids
        cannot be reused); made, with its arguments checked, on first use.  Float
        handles narrower than ``dtype`` are cast to it, unless ``keep_dtype``."""
        found = _UNHASHABLE
        tag = (_KEEP_DTYPE,) if keep_dtype else ()
        if isinstance(objs[0], NdArray):
            key = tag + objs
            try:  # NdArray handles hash and compare by identity, in C: no id() per item
                found = self._cached.get(key)
            except TypeError:  # plain arrays among them
                pass
        if found is _UNHASHABLE:  # arrays cannot be hashed (nor compared as keys): their ids
            key = tag + tuple(map(id, objs))
            found = self._cached.get(key)
        if found is not None:
            if found is not self._last:
                self._cached.move_to_end(key)
                self._last = found
            return found
        found = self._cached[key] = self._last = CachedPlan(
            self, ListSource(objs, operation, None if keep_dtype else self.dtype))
        self._cached_bytes += _plain_bytes(found.source)
        while len(self._cached) > 1 and (len(self._cached) > PLAN_CACHE_SIZE
                                         or self._cached_bytes > PLAN_CACHE_BYTES):
            _, dropped = self._cached.popitem(last=False)
            self._cached_bytes -= _plain_bytes(dropped.source)
        return found

    # -- running ------------------------------------------------------------------
    def agree(self, group: Group, call: Call, always: bool = False) -> bool:
        """Whether the ranks' memory layouts agree too; raises on any other mismatch.
        Skipped where ``check_agreement`` is off, unless ``always``."""
        if not (self.check_agreement or always):
            return True
        return agreement.agree(group, call, self.guard.wait_agreement, _check_what(group, call))

    def deferred_check(self, group: Group, call: Call) -> agreement.DeferredCheck | None:
        """``call``'s agreement check, started now, for ``settle()`` when its outcome is
        needed; None where ``check_agreement`` is off (the layouts are taken to agree)."""
        if not self.check_agreement:
            return None
        return agreement.DeferredCheck(group, call, self.guard.wait_agreement,
                                       _check_what(group, call))

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

    def pipeline(self, group: Group, collective: Collective, device: bool):
        """A pipeline of the transport for a plan: NCCL for a device plan, else MPI."""
        return (self.nccl if device else self.mpi).pipeline(group, collective)

    def execute(self, group: Group, plan: Plan, operation: str, root: int,
                division: bool) -> None:
        """Run ``operation`` on the arrays of ``plan`` after the agreement check (small
        data go inline with the check itself); the first chunk is packed while the
        check's rows travel."""
        key = (operation, group.name, root, division)
        setup = plan.setups.get(key)
        if setup is None:
            setup = plan.setups[key] = CollectiveSetup(self, group, plan, operation, root,
                                                       division)
        guard = self.guard
        guard.enter(operation, group)
        if not self.check_agreement:
            pipeline = setup.pipeline.load(plan.chunks)
        elif setup.inline is not None:
            self._issued += 1
            setup.inline.run(guard.wait_agreement)
            return
        else:
            pipeline = setup.pipeline.load(plan.chunks)
            if not agreement.agree(group, setup.call, guard.wait_agreement, setup.what_check,
                                   pipeline.prepare):
                pipeline = self.pipeline(group, setup.collective, plan.device).load(
                    plan.canonical())  # the memory layouts differ between ranks
        guard.run(pipeline.drain, pipeline.pending_requests)

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
            return (f"new_group {name!r} (world rank {world.ranks[world.rank]}), making its "
                    "communicator")

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
            raise self.guard.broken_by(e, [], what)

    def wait(self, group: Group, operation: str, request) -> None:
        """Wait for one data collective issued outside a pipeline."""
        self._issued += 1
        self.guard.wait([request], lambda: group.describe(operation))

    def warn_slower_gpu_path(self, path: str) -> None:
        """Say once which slower path GPU arrays take."""
        if not self._warned_gpu_path:
            self._warned_gpu_path = True
            logger.warning(f"the communicator moves these GPU arrays through {path}, which is "
                           "slower than NCCL: NCCL needs a GPU context "
                           "(get_extension_context('cudnn')), CuPy with NCCL, and every array "
                           "of a call on the GPU")


def _check_what(group: Group, call: Call):
    """What names ``call``'s agreement check in the errors of its wait."""
    return lambda: group.describe(call.operation) + ", agreement check"


def _plain_bytes(source: ListSource) -> int:
    return sum(a.nbytes for a, h in zip(source.arrays, source.handles) if h is None)


