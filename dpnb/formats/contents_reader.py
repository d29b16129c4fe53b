"""Network files (``.nnp``, ``.nntxt``, ``.protobuf``, parameter ``.h5``) read into
everything nnabla's training tools need: the context, the training configuration, the
datasets, the networks built as dpnb graphs, and the optimizers, monitors and executors
wired to those networks (``load``, which ``dpnb.utils.load`` gives under nnabla's name)."""
from __future__ import annotations

import os
import re
from collections import OrderedDict

import numpy as np

from .. import functions as F
from .. import solvers as S
from ..context import Context, context_scope, set_default_context
from ..errors import DpnbError
from ..ext_utils import get_extension_context
from ..initializer import (ConstantInitializer, NormalInitializer, RangeInitializer,
                           UniformInitializer)
from ..logger import logger
from ..parameter import assign_entries, get_current_parameter_scope, shapes_in
from ..utils import data_iterator as iterators
from ..utils.learning_rate_scheduler import (CosineScheduler, ExponentialScheduler,
                                             LinearWarmupScheduler, PolynomialScheduler,
                                             StepScheduler)
from . import nnabla_pb2, parameter_files
from .files import describe
from .messages import message_to_dict
from .network_files import NETWORK_EXTENSIONS, read_network_file
from .network_reader import NnpNetwork


class Info:
    """What ``load`` read: ``proto`` (the merged files), ``global_config``,
    ``training_config`` (where the files have one), ``datasets``, ``networks``,
    ``optimizers``, ``monitors`` and ``executors``, each an OrderedDict by name."""


class LoadedVariable:
    """A variable of a loaded network: its ``name``, its declaration in the file
    (``proto``) and the dpnb variable built for it (``variable_instance``)."""

    def __init__(self, name: str, proto, variable_instance):
        self.name, self.proto, self.variable_instance = name, proto, variable_instance

    @property
    def shape(self) -> tuple[int, ...]:
        return self.variable_instance.shape


class LoadedNetwork:
    """A network of the files built as a dpnb graph: ``variables`` and ``parameters``
    (name -> LoadedVariable), and the names of its ``inputs`` and ``outputs``."""

    def __init__(self, proto, scope: dict, batch_size: int | None, source: str):
        built = NnpNetwork(proto, scope, batch_size, source)
        self.name, self.batch_size, self.proto = proto.name, built.batch_size, proto
        declared = {v.name: v for v in proto.variable}
        self.variables: OrderedDict[str, LoadedVariable] = OrderedDict()
        self.parameters: OrderedDict[str, LoadedVariable] = OrderedDict()
        for name, variable in built.variables.items():
            kind = self.parameters if declared[name].type == "Parameter" else self.variables
            kind[name] = LoadedVariable(name, declared[name], variable)
        self.inputs = list(built.inputs)
        self.outputs = list(built.outputs)

    def variable(self, name: str) -> LoadedVariable:
        """The variable ``name``, or an error naming the network's variables."""
        if name not in self.variables:
            raise DpnbError(f"network {self.name!r} has no variable {name!r} (or it is not "
                            f"connected to its outputs); its variables are "
                            f"{list(self.variables)}")
        return self.variables[name]


def _read(info: Info, source, extension: str) -> list:
    """Merge one file into ``info.proto``; its parameters, decoded and checked against
    ``info.parameter_scope`` (none where ``exclude_parameter``)."""
    ext = (os.path.splitext(os.fspath(source))[1]
           if isinstance(source, (str, os.PathLike)) else extension)
    expected = shapes_in(info.parameter_scope)
    if ext == ".h5":
        if info.exclude_parameter:
            return []
        return parameter_files.load(source, ext, nnabla_pb2.NNablaProtoBuf(), expected)
    if ext not in NETWORK_EXTENSIONS:
        raise DpnbError(f"cannot load {describe(source)}: load reads "
                        f"{', '.join(NETWORK_EXTENSIONS + ('.h5',))}, got {ext!r}; name the file "
                        "so, or pass extension= with a file object")
    proto, entries = read_network_file(source, ext, expected)
    if not info.parameter_only:
        info.proto.MergeFrom(proto)
    return [] if info.exclude_parameter else entries


def _context(proto) -> Context:
    """The context a file's ``global_config`` names."""
    if not proto.backends:
        raise DpnbError("the file's global_config has an old-style context (no 'backends'); "
                        "save it again with nnabla 1.x or dpnb")
    return Context(backend=list(proto.backends), array_class=proto.array_class,
                   device_id=str(proto.device_id))


def _default_context(info: Info, context: str | None) -> Context:
    """The context given (``"cpu"``, ``"cudnn"`` or ``"cudnn:<device>"``), else the
    files' global_config, else the CPU's; where the files have a global_config, it
    becomes the default context, as in nnabla."""
    if context:
        name, _, device = context.partition(":")
        if name not in ("cpu", "cudnn"):
            raise DpnbError(f"load(context={context!r}): give 'cpu', 'cudnn' or "
                            "'cudnn:<device id>'")
        ctx = (get_extension_context("cpu") if name == "cpu"
               else get_extension_context("cudnn", device_id=device or "0"))
    elif info.proto.HasField("global_config"):
        ctx = _context(info.proto.global_config.default_context)
    else:
        ctx = get_extension_context("cpu")
    if info.proto.HasField("global_config"):
        set_default_context(ctx)
    return ctx


class GlobalConfig:
    """The files' ``global_config``: the ``default_context`` the networks run in."""

    def __init__(self, default_context: Context):
        self.default_context = default_context


class TrainingConfig:
    """The files' ``training_config``: epochs, iterations per epoch, whether to keep
    the best model, and how often to monitor (10 iterations where unset)."""

    def __init__(self, proto):
        self.max_epoch = proto.max_epoch
        self.iter_per_epoch = proto.iter_per_epoch
        self.save_best = proto.save_best
        self.monitor_interval = proto.monitor_interval if proto.monitor_interval > 0 else 10


class Dataset:
    """A dataset of the files: its ``uri``, ``cache_dir``, whether images are
    ``normalize``d, and ``data_iterator``, a function making its data iterator (None
    where ``load`` was told not to prepare iterators)."""

    def __init__(self, proto, index: int, prepare_data_iterator: bool):
        self.uri, self.cache_dir = proto.uri, proto.cache_dir
        self.normalize = not proto.no_image_normalization
        self.data_iterator = _iterator_maker(proto, self.normalize, index) \
            if prepare_data_iterator else None


def _iterator_maker(proto, normalize: bool, index: int):
    """How nnabla makes a dataset's iterator: from its cache where one is asked for or
    already there (creating it first when explicitly asked), else from the CSV
    file, caching into ``cache_dir`` as it reads."""
    rng = np.random.RandomState(index)
    uri, batch_size, shuffle = proto.uri, proto.batch_size, proto.shuffle
    cache_dir = proto.cache_dir or None

    def from_cache():
        return iterators.data_iterator_cache(cache_dir, batch_size, shuffle, rng=rng,
                                             normalize=normalize, with_memory_cache=True)

    if cache_dir and proto.create_cache_explicitly:
        index_file = os.path.join(cache_dir, "cache_index.csv")
        if not os.path.exists(index_file) or proto.overwrite_cache:
            os.makedirs(cache_dir, exist_ok=True)
            logger.log(99, 'Creating cache data for "%s"', uri)
            with iterators.data_iterator_csv_dataset(uri, batch_size, shuffle, rng=rng,
                                                     normalize=False, cache_dir=cache_dir,
                                                     with_memory_cache=False):
                pass
        return from_cache
    if (not cache_dir or proto.overwrite_cache or not os.path.isdir(cache_dir)
            or not os.listdir(cache_dir)):
        if cache_dir:
            os.makedirs(cache_dir, exist_ok=True)
        return lambda: iterators.data_iterator_csv_dataset(uri, batch_size, shuffle, rng=rng,
                                                           normalize=normalize,
                                                           cache_dir=cache_dir)
    return from_cache


def _scheduler(solver_proto, init_lr: float):
    """The learning-rate schedule a solver's proto names (constant where none is)."""
    kind = solver_proto.lr_scheduler_type
    scheduler = ExponentialScheduler(init_lr, 1.0, 1)
    if kind == "Polynomial":
        p = solver_proto.polynomial_scheduler_param
        if p.power != 0.0:
            scheduler = PolynomialScheduler(init_lr, p.max_iter, p.power)
    elif kind == "Cosine":
        scheduler = CosineScheduler(init_lr, solver_proto.cosine_scheduler_param.max_iter)
    elif kind == "Exponential":
        p = solver_proto.exponential_scheduler_param
        if p.gamma != 1.0:
            scheduler = ExponentialScheduler(init_lr, p.gamma, max(p.iter_interval, 1))
    elif kind == "Step":
        p = solver_proto.step_scheduler_param
        if p.gamma != 1.0 and p.iter_steps:
            scheduler = StepScheduler(init_lr, p.gamma, list(p.iter_steps))
    elif kind == "":
        if solver_proto.lr_decay_interval != 0 or solver_proto.lr_decay != 0.0:
            scheduler = ExponentialScheduler(
                init_lr, solver_proto.lr_decay if solver_proto.lr_decay > 0.0 else 1.0,
                max(solver_proto.lr_decay_interval, 1))
    else:
        raise DpnbError(f"learning rate scheduler {kind!r} is not one nnabla's files name: "
                        "Polynomial, Cosine, Exponential, Step or none")
    if solver_proto.lr_warmup_scheduler_type == "Linear":
        warmup = solver_proto.linear_warmup_scheduler_param.warmup_iter
        if warmup >= 1:
            scheduler = LinearWarmupScheduler(scheduler, warmup)
    return scheduler


def _solver(solver_proto):
    """The dpnb solver of a solver's proto, with its hyperparameters."""
    name = "Sgd" if solver_proto.type == "SGD" else solver_proto.type
    cls = getattr(S, name, None)
    field = solver_proto.WhichOneof("parameter")
    if not (isinstance(cls, type) and issubclass(cls, S.Solver)) or field is None:
        raise DpnbError(f"the file's solver {solver_proto.type!r} (parameters "
                        f"{field!r}) is not one dpnb reads; dpnb reads the solvers whose "
                        "hyperparameters its network format holds (Sgd, Momentum, Nesterov, "
                        "Adagrad, RMSprop, Adam, AdamW)")
    return cls(**message_to_dict(getattr(solver_proto, field)))


class Optimizer:
    """An optimizer of the files: the ``solver`` (with its ``scheduler``), the
    ``network`` it trains, and after linking its data, losses, parameters and
    ``target`` (the variable to run backward from)."""

    def __init__(self, proto, ctx: Context):
        if proto.solver.states:
            raise DpnbError(f"optimizer {proto.name!r} holds solver states in the file, which "
                            "dpnb's load does not restore; save the states apart with "
                            "solver.save_states and load them with solver.load_states")
        self.proto, self.comm, self.name, self.order = proto, None, proto.name, proto.order
        self.start_iter, self.end_iter = max(proto.start_iter, 0), max(proto.end_iter, 0)
        self.update_interval = proto.update_interval if proto.update_interval > 0 else 1
        self.network = None
        with context_scope(ctx):
            self.solver = _solver(proto.solver)
        self.weight_decay = proto.solver.weight_decay
        self.lr_decay = proto.solver.lr_decay if proto.solver.lr_decay > 0.0 else 1.0
        self.lr_decay_interval = (proto.solver.lr_decay_interval
                                  if proto.solver.lr_decay_interval > 0 else 1)
        self.scheduler = _scheduler(proto.solver, self.solver.learning_rate())


class Monitor:
    """A monitor of the files: the ``network`` whose variables are watched, and after
    linking its data, ``monitor_variables`` and ``target``."""

    def __init__(self, proto):
        self.proto, self.name, self.network = proto, proto.name, None


class Executor:
    """An executor of the files: the ``network`` to run, its evaluation settings, and
    after linking its data, outputs, parameters and ``forward_target``."""

    def __init__(self, proto):
        self.proto, self.name, self.network = proto, proto.name, None
        self.num_evaluations = proto.num_evaluations if proto.num_evaluations > 0 else 1
        self.repeat_evaluation_type = proto.repeat_evaluation_type
        self.need_back_propagation = proto.need_back_propagation
        self.no_image_normalization = proto.no_image_normalization


def _generator(proto):
    """The initializer a generator variable draws from (type and multiplier)."""
    m = proto.multiplier
    makers = {"Normal": lambda: NormalInitializer(sigma=m),
              "Uniform": lambda: UniformInitializer(lim=(-m, m)),
              "Range": lambda: RangeInitializer(start=0, step=m),
              "Constant": lambda: ConstantInitializer(value=m)}
    if proto.type not in makers:
        raise DpnbError(f"generator type {proto.type!r} of {proto.variable_name!r} is not "
                        f"one of {sorted(makers)}")
    return makers[proto.type]()


def _matching(pattern: str, names: list[str]) -> list[str]:
    """The names ``pattern`` stands for: itself, or with each ``{...}`` as ``[<n>]``."""
    if pattern in names:
        return [pattern]
    regex = re.compile(re.sub(r"\{[^}]*\}", r"\\[\\d+\\]", pattern))
    found = [n for n in names if regex.match(n)]
    if not found:
        raise DpnbError(f"variable {pattern!r} is not in the network, whose variables are "
                        f"{names}")
    return found


def _assign(network: LoadedNetwork, items, value) -> OrderedDict:
    return OrderedDict((network.variable(item.variable_name), value(item)) for item in items)


def _parameters_of(network: LoadedNetwork, items) -> OrderedDict:
    """Each parameter an entry names (patterns allowed) -> its learning rate multiplier."""
    found = OrderedDict()
    names = list(network.parameters) + list(network.variables)
    for item in items:
        for name in _matching(item.variable_name, names):
            v = network.parameters.get(name) or network.variables[name]
            found[v] = item.learning_rate_multiplier
    return found


def _link_network(user: Optimizer | Monitor | Executor, info: Info,
                  role: str) -> LoadedNetwork:
    """Point an optimizer, monitor or executor (``role``) at the network it runs and at
    the variables it feeds there (data names and generators); returns the network."""
    proto = user.proto
    network = user.network = _network(info, proto.network_name, f"{role} {proto.name!r}")
    user.dataset_assign = _assign(network, proto.data_variable, lambda d: d.data_name)
    user.generator_assign = _assign(network, proto.generator_variable, _generator)
    return network


def _data_iterators(info: Info, proto) -> OrderedDict:
    """Each dataset an optimizer or monitor reads -> its data iterator."""
    return OrderedDict((d, _dataset(info, d, proto.name).data_iterator)
                       for d in proto.dataset_name)


def _link_optimizer(optimizer: Optimizer, info: Info) -> None:
    o = optimizer.proto
    network = _link_network(optimizer, info, "optimizer")
    optimizer.data_iterators = _data_iterators(info, o)
    optimizer.loss_variables = [network.variable(v.variable_name) for v in o.loss_variable]
    optimizer.parameter_learning_rate_multipliers = _parameters_of(network,
                                                                   o.parameter_variable)
    trained = {}
    for v, rate in optimizer.parameter_learning_rate_multipliers.items():
        if rate > 0.0:
            trained[v.name] = v.variable_instance
        else:
            v.variable_instance.need_grad = False
    if trained:
        optimizer.solver.set_parameters(trained)
    else:
        optimizer.solver.clear_parameters()  # nnabla's set_parameters({}): nothing to train
    optimizer.parameters = OrderedDict(sorted(trained.items()))
    for v in optimizer.loss_variables:
        v.variable_instance.grad.fill(1.0 / v.variable_instance.size)
    losses = [v.variable_instance for v in optimizer.loss_variables]
    optimizer.target = losses[0] if len(losses) == 1 else F.sink(*losses, one_input_grad=False)


def _link_monitor(monitor: Monitor, info: Info) -> None:
    m = monitor.proto
    network = _link_network(monitor, info, "monitor")
    monitor.data_iterators = _data_iterators(info, m)
    monitor.monitor_variables = [network.variable(v.variable_name) for v in m.monitor_variable]
    monitor.target = F.sink(*[v.variable_instance for v in monitor.monitor_variables])


def _link_executor(executor: Executor, info: Info) -> None:
    e = executor.proto
    network = _link_network(executor, info, "executor")
    executor.output_assign = _assign(network, e.output_variable,
                                     lambda o: [o.type, o.data_name])
    executor.parameters = OrderedDict((v, v.name) for v in
                                      _parameters_of(network, e.parameter_variable))
    executor.forward_target = F.sink(*[v.variable_instance for v in executor.output_assign])
    if executor.need_back_propagation:
        executor.loss_variables = [network.variable(v.variable_name) for v in e.loss_variable]
        executor.parameter_learning_rate_multipliers = _parameters_of(network,
                                                                      e.parameter_variable)
        executor.backward_target = F.sink(*[v.variable_instance
                                            for v in executor.loss_variables])


def _network(info: Info, name: str, user: str) -> LoadedNetwork:
    if name not in info.networks:
        raise DpnbError(f"{user} uses network {name!r}, which the files do not define; they "
                        f"define {list(info.networks)}")
    return info.networks[name]


def _dataset(info: Info, name: str, user: str) -> Dataset:
    if name not in info.datasets:
        raise DpnbError(f"{user} uses dataset {name!r}, which the files do not define; they "
                        f"define {list(info.datasets)}")
    return info.datasets[name]


def load(filenames, prepare_data_iterator: bool | None = True, batch_size: int | None = None,
         exclude_parameter: bool = False, parameter_only: bool = False,
         extension: str = ".nntxt", context: str | None = None) -> Info:
    """Read network files (a list of paths, or one path or file object whose format
    ``extension`` names) and build what they define: networks as dpnb graphs (with
    ``batch_size`` for a variable batch axis), datasets (with their iterators where
    ``prepare_data_iterator``; None: where training is configured), optimizers,
    monitors and executors.  Parameters go to the current parameter scope, unless
    ``exclude_parameter``; ``parameter_only`` reads only parameters."""
    info = Info()
    info.prepare_data_iterator, info.batch_size = prepare_data_iterator, batch_size
    info.exclude_parameter, info.parameter_only = exclude_parameter, parameter_only
    info.proto = nnabla_pb2.NNablaProtoBuf()
    info.parameter_scope = get_current_parameter_scope()
    sources = filenames if isinstance(filenames, (list, tuple)) else [filenames]
    entries = [entry for source in sources for entry in _read(info, source, extension)]
    assign_entries(entries, "network files " + ", ".join(describe(s) for s in sources))
    info.default_context = _default_context(info, context)
    info.global_config = GlobalConfig(info.default_context)
    logger.log(99, 'Using context "%s"', info.default_context)
    if info.proto.HasField("training_config"):
        info.training_config = TrainingConfig(info.proto.training_config)
    if prepare_data_iterator is None:
        prepare_data_iterator = (info.proto.HasField("training_config")
                                 and info.training_config.max_epoch > 0)
    info.datasets = OrderedDict((d.name, Dataset(d, i, prepare_data_iterator))
                                for i, d in enumerate(info.proto.dataset))
    info.renamed_variables = {}
    source = ", ".join(describe(s) for s in sources)
    with context_scope(info.default_context):
        info.networks = OrderedDict(
            (n.name, LoadedNetwork(n, info.parameter_scope, batch_size, source))
            for n in info.proto.network)
    info.optimizers = OrderedDict((o.name, Optimizer(o, _optimizer_context(o, info)))
                                  for o in info.proto.optimizer)
    info.monitors = OrderedDict((m.name, Monitor(m)) for m in info.proto.monitor)
    info.executors = OrderedDict((e.name, Executor(e)) for e in info.proto.executor)
    for optimizer in info.optimizers.values():
        _link_optimizer(optimizer, info)
    for monitor in info.monitors.values():
        _link_monitor(monitor, info)
    for executor in info.executors.values():
        _link_executor(executor, info)
    return info


def _optimizer_context(proto, info: Info) -> Context:
    """An optimizer's own context where its solver names one, else the default."""
    own = proto.solver.context
    return _context(own) if own.backends else info.default_context
