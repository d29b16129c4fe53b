"""nnabla's training contents as an ``NNablaProtoBuf`` message (``create_proto``, what
``nnabla.utils.save`` writes): configs, networks, datasets, optimizers with their
solvers' hyperparameters, monitors and executors, checked as they are written."""
from __future__ import annotations

from ..errors import DpnbError
from ..parameter import get_parameters
from . import nnabla_pb2, parameter_files
from .network_writer import NetworkWriter

CONTENT_KEYS = ("networks", "executors", "global_config", "training_config", "datasets",
                "optimizers", "monitors")


def _executor(proto, executor: dict, networks: dict[str, NetworkWriter]) -> None:
    """Add one entry of ``contents['executors']``: the network's data, outputs and parameters."""
    name, net_name = executor.get("name"), executor.get("network")
    if net_name not in networks:
        raise DpnbError(f"executor {name!r} runs network {net_name!r}, but contents['networks'] "
                        f"has {sorted(networks)}; name one of them in 'network'")
    net = networks[net_name]
    remap = executor.get("remp", {})
    e = proto.executor.add()
    e.name, e.network_name = str(name), net_name
    for key in ("no_image_normalization", "num_evaluations", "repeat_evaluation_type",
                "need_back_propagation"):
        if executor.get(key) is not None:
            setattr(e, key, executor[key])
    for key, field in (("data", e.data_variable), ("output", e.output_variable)):
        for v in executor.get(key, net.inputs if key == "data" else net.outputs):
            if v not in net.variables:
                raise DpnbError(f"executor {name!r}: {key} variable {v!r} is not in network "
                                f"{net_name!r}, whose variables are {list(net.variables)}; "
                                "name them in the network's 'names' or 'outputs'")
            item = field.add()
            item.variable_name, item.data_name = v, remap.get(v, v)
    for param in net.parameters:
        e.parameter_variable.add().variable_name = param
    _generators(e, executor)


def _dataset(proto, dataset: dict) -> str:
    """Add one entry of ``contents['datasets']``: where the data is, how it is batched,
    and the names of the variables it feeds."""
    missing = [k for k in ("name", "uri", "variables", "shuffle", "batch_size",
                           "no_image_normalization") if k not in dataset]
    if missing:
        raise DpnbError(f"dataset {dataset.get('name')!r} lacks {missing}; give name, uri, "
                        "variables (name -> variable), shuffle, batch_size, "
                        "no_image_normalization and optionally cache_dir")
    d = proto.dataset.add()
    d.name, d.uri = str(dataset["name"]), str(dataset["uri"])
    if dataset.get("cache_dir") is not None:
        d.cache_dir = str(dataset["cache_dir"])
    d.shuffle, d.batch_size = bool(dataset["shuffle"]), int(dataset["batch_size"])
    d.no_image_normalization = bool(dataset["no_image_normalization"])
    d.variable.extend(str(name) for name in dataset["variables"])
    return d.name


def _dataset_names(owner: str, given, datasets: list[str], required: bool) -> list[str]:
    """The dataset names an optimizer or monitor uses (a name, or a list or tuple of them)."""
    names = [given] if isinstance(given, str) else list(given)
    unknown = [n for n in names if n not in datasets]
    if unknown and (required or not isinstance(given, str)):
        raise DpnbError(f"{owner} uses datasets {unknown}, but contents['datasets'] has "
                        f"{datasets}; name those")
    return [n for n in names if n in datasets]


def _solver_field(solver_type: str):
    """The ``Solver`` field (``adam_param`` ...) holding a solver type's hyperparameters."""
    wanted = solver_type.lower() + "param"
    field = next((f for f in nnabla_pb2.Solver.DESCRIPTOR.fields
                  if f.name.replace("_", "") == wanted), None)
    if field is None:
        known = [f.name for f in nnabla_pb2.Solver.DESCRIPTOR.oneofs_by_name["parameter"].fields]
        raise DpnbError(f"solver {solver_type} cannot be written to a network file: dpnb's "
                        f"format holds the hyperparameters of {', '.join(known)}; use one of "
                        "those solvers, or save its state with solver.save_states")
    return field


def _optimizer(proto, optimizer: dict, networks: dict[str, NetworkWriter],
               datasets: list[str]) -> None:
    """Add one entry of ``contents['optimizers']``: the solver and its hyperparameters,
    the network it trains (its outputs as losses) and the datasets feeding it."""
    missing = [k for k in ("name", "solver", "network", "dataset", "weight_decay", "lr_decay",
                           "lr_decay_interval", "update_interval") if k not in optimizer]
    if missing:
        raise DpnbError(f"optimizer {optimizer.get('name')!r} lacks {missing}; give name, "
                        "solver, network, dataset, weight_decay, lr_decay, lr_decay_interval "
                        "and update_interval")
    name, solver = str(optimizer["name"]), optimizer["solver"]
    net = networks.get(optimizer["network"])
    o = proto.optimizer.add()
    o.name = name
    o.network_name = net.name if net is not None else "None"
    o.dataset_name.extend(_dataset_names(f"optimizer {name!r}", optimizer["dataset"], datasets,
                                         required=False))
    o.solver.type = solver.name
    field = _solver_field(solver.name)
    params = getattr(o.solver, field.name)
    params.SetInParent()
    for key, value in solver.info.items():
        if key in params.DESCRIPTOR.fields_by_name:
            setattr(params, key, value)
    o.solver.weight_decay = optimizer["weight_decay"]
    o.solver.lr_decay = optimizer["lr_decay"]
    o.solver.lr_decay_interval = optimizer["lr_decay_interval"]
    o.update_interval = optimizer["update_interval"]
    for variable, data in optimizer.get("data_variables", {}).items():
        item = o.data_variable.add()
        item.variable_name, item.data_name = variable, data
    if net is not None:
        for loss in optimizer.get("loss_variables", net.outputs):
            o.loss_variable.add().variable_name = loss
    trained = set(solver.get_parameters())
    for param in (net.parameters if net is not None else get_parameters(grad_only=False)):
        item = o.parameter_variable.add()
        item.variable_name = param
        item.learning_rate_multiplier = 1.0 if param in trained else 0.0
    _generators(o, optimizer)


def _generators(message, entry: dict) -> None:
    for v in entry.get("generator_variables", []):
        g = message.generator_variable.add()
        g.variable_name, g.type, g.multiplier = v, "Constant", 0


def _monitor(proto, monitor: dict, networks: dict[str, NetworkWriter],
             datasets: list[str]) -> None:
    """Add one entry of ``contents['monitors']``: the network whose outputs are watched
    as errors, on the datasets named."""
    name, net_name = monitor.get("name"), monitor.get("network")
    if net_name not in networks:
        raise DpnbError(f"monitor {name!r} watches network {net_name!r}, but "
                        f"contents['networks'] has {sorted(networks)}; name one of them")
    m = proto.monitor.add()
    m.name, m.network_name = str(name), net_name
    m.dataset_name.extend(_dataset_names(f"monitor {name!r}", monitor.get("dataset", []),
                                         datasets, required=True))
    if not m.dataset_name:
        raise DpnbError(f"monitor {name!r} names no dataset; give 'dataset' (a name or a "
                        "list of names from contents['datasets'])")
    for variable, data in monitor.get("data_variables", {}).items():
        item = m.data_variable.add()
        item.variable_name, item.data_name = variable, data
    for out in monitor.get("monitor_variables", networks[net_name].outputs):
        item = m.monitor_variable.add()
        item.type, item.variable_name = "Error", out
    _generators(m, monitor)


def create_proto(contents: dict, include_params: bool = False, variable_batch_size: bool = True,
                 parameters: dict | None = None):
    """nnabla's NNablaProtoBuf message of ``contents`` (configs, networks, datasets,
    optimizers, monitors, executors)."""
    unknown = sorted(set(contents) - set(CONTENT_KEYS))
    if unknown:
        raise DpnbError(f"contents keys {unknown} are not nnabla's: save writes "
                        f"{', '.join(CONTENT_KEYS)}; drop the others")
    params = get_parameters(grad_only=False) if parameters is None else parameters
    parameter_names = {id(v.data): name for name, v in params.items()}
    proto = nnabla_pb2.NNablaProtoBuf()
    if "global_config" in contents:
        ctx = contents["global_config"]["default_context"]
        proto.global_config.default_context.backends.extend(ctx.backend)
        proto.global_config.default_context.array_class = ctx.array_class
        proto.global_config.default_context.device_id = str(ctx.device_id)
    if "training_config" in contents:
        t = contents["training_config"]
        proto.training_config.max_epoch = t["max_epoch"]
        proto.training_config.iter_per_epoch = t["iter_per_epoch"]
        proto.training_config.save_best = t["save_best"]
    networks: dict[str, NetworkWriter] = {}
    for net in contents.get("networks", []):
        writer = NetworkWriter(net, parameter_names, variable_batch_size)
        if writer.name in networks:
            raise DpnbError(f"two networks are named {writer.name!r}; give each its own name")
        networks[writer.name] = writer
        writer.to_proto(proto.network.add())
    datasets = [_dataset(proto, d) for d in contents.get("datasets", [])]
    for optimizer in contents.get("optimizers", []):
        _optimizer(proto, optimizer, networks, datasets)
    for monitor in contents.get("monitors", []):
        _monitor(proto, monitor, networks, datasets)
    for executor in contents.get("executors", []):
        _executor(proto, executor, networks)
    if include_params:
        parameter_files.to_proto(parameter_files.parameter_entries(params), proto)
    return proto
