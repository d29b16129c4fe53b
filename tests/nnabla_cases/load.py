"""Network-file cases run with nnabla (record_load.py records them into
fixtures/nnabla/load/) and with dpnb (test_nnabla_load.py compares): a training setup
saved and loaded (what nnabla.utils.load reports of it, its executor run), NnpNetworkPass
edits of a loaded network, and ``Function.arguments``.  Each takes the library's modules."""
BATCH = 4

PASSES = {
    "none": lambda cb: None,
    "remove_and_rewire": lambda cb: cb.remove_and_rewire("Tanh"),
    "use_up_to": lambda cb: cb.use_up_to("Tanh_out_1"),
    "drop_function": lambda cb: cb.drop_function("Affine_4"),
    "fix_parameters": lambda cb: cb.fix_parameters(),
}


def training_contents(nn, F, PF, S, ext_utils) -> dict:
    """An MLP with nnabla's whole training setup (global and training configuration, two
    datasets, an Adam and a Momentum optimizer, a monitor and an executor), as the
    contents ``nnabla.utils.save.save`` takes."""
    x, t = nn.Variable([BATCH, 8]), nn.Variable([BATCH, 1])
    y = F.sigmoid(PF.affine(F.relu(PF.affine(x, 6, name="fc1")), 1, name="fc2"))
    loss = F.mean(F.binary_cross_entropy(y, t))
    adam = S.Adam(alpha=0.002, beta1=0.8)
    adam.set_parameters(nn.get_parameters())
    momentum = S.Momentum(lr=0.05, momentum=0.7)
    with nn.parameter_scope("fc2"):
        momentum.set_parameters(nn.get_parameters())
    dataset = {"uri": "train.csv", "cache_dir": "", "shuffle": True, "batch_size": BATCH,
               "no_image_normalization": True, "variables": {"x": x, "t": t}}
    ctx = ext_utils.get_extension_context("cpu", device_id="0", type_config="float")
    return {
        "global_config": {"default_context": ctx},
        "training_config": {"max_epoch": 7, "iter_per_epoch": 11, "save_best": True},
        "networks": [
            {"name": "Main", "batch_size": BATCH, "outputs": {"loss": loss},
             "names": {"x": x, "t": t}},
            {"name": "Runtime", "batch_size": BATCH, "outputs": {"y": y}, "names": {"x": x}}],
        "datasets": [dict(dataset, name="train"),
                     dict(dataset, name="valid", uri="valid.csv", shuffle=False)],
        "optimizers": [
            {"name": "adam", "solver": adam, "network": "Main", "dataset": ["train"],
             "weight_decay": 0.001, "lr_decay": 0.5, "lr_decay_interval": 3,
             "update_interval": 2},
            {"name": "momentum", "solver": momentum, "network": "Main", "dataset": "train",
             "weight_decay": 0, "lr_decay": 1, "lr_decay_interval": 1, "update_interval": 1}],
        "monitors": [{"name": "valid_error", "network": "Main", "dataset": ("valid",)}],
        "executors": [{"name": "runtime", "network": "Runtime", "data": ["x"],
                       "output": ["y"], "num_evaluations": 3,
                       "repeat_evaluation_type": "mean", "no_image_normalization": True}],
    }


def load_report(info) -> dict:
    """What ``load`` made of the training setup: context, configuration, datasets,
    networks, optimizers, monitors and executors, as plain values."""
    tc = info.training_config
    return {
        "context": info.default_context.backend,
        "training_config": [tc.max_epoch, tc.iter_per_epoch, tc.save_best, tc.monitor_interval],
        "datasets": {k: [d.uri, d.cache_dir, d.normalize, d.data_iterator]
                     for k, d in info.datasets.items()},
        "networks": {k: {"inputs": list(n.inputs), "outputs": list(n.outputs)}
                     for k, n in info.networks.items()},
        "optimizers": {k: {
            "solver": o.solver.name, "info": o.solver.info,
            "learning_rate": o.solver.learning_rate(),
            "update_interval": o.update_interval, "weight_decay": o.weight_decay,
            "lr_decay": o.lr_decay, "lr_decay_interval": o.lr_decay_interval,
            "scheduler": type(o.scheduler).__name__,
            "data_iterators": list(o.data_iterators),
            "losses": [v.name for v in o.loss_variables],
            "parameters": list(o.parameters),
            "multipliers": {v.name: m for v, m in o.parameter_learning_rate_multipliers.items()},
        } for k, o in info.optimizers.items()},
        "monitors": {k: {"network": m.network.name, "data_iterators": list(m.data_iterators),
                         "variables": [v.name for v in m.monitor_variables]}
                     for k, m in info.monitors.items()},
        "executors": {k: {"network": e.network.name, "num_evaluations": e.num_evaluations,
                          "repeat_evaluation_type": e.repeat_evaluation_type,
                          "need_back_propagation": e.need_back_propagation,
                          "no_image_normalization": e.no_image_normalization,
                          "data": {v.name: d for v, d in e.dataset_assign.items()},
                          "output": {v.name: o for v, o in e.output_assign.items()},
                          "parameters": sorted(e.parameters.values())}
                      for k, e in info.executors.items()},
    }


def run_executor(info, x):
    """The output of the loaded setup's "runtime" executor for the input ``x``."""
    executor = info.executors["runtime"]
    (data,) = executor.dataset_assign
    data.variable_instance.d = x
    executor.forward_target.forward()
    (out,) = executor.output_assign
    return out.variable_instance.d.copy()


def pass_report(nn, net) -> dict:
    """The inputs and outputs (with shapes), variables and trainable parameters of a
    network a pass edited."""
    return {"inputs": {k: list(v.shape) for k, v in net.inputs.items()},
            "outputs": {k: list(v.shape) for k, v in net.outputs.items()},
            "variables": sorted(net.variables),
            "grad_parameters": sorted(nn.get_parameters())}


def run_network(F, net, inputs: dict) -> dict:
    """The network's outputs (by name) computed from ``inputs`` (by name)."""
    for k, v in net.inputs.items():
        v.d = inputs[k]
    outputs = [net.outputs[k] for k in sorted(net.outputs)]
    F.sink(*outputs).forward()
    return {k: v.d.copy() for k, v in zip(sorted(net.outputs), outputs)}


def function_arguments(nn, F, PF) -> dict:
    """``Function.arguments`` of a convolution, reshape, sum and max pooling."""
    nn.clear_parameters()
    x = nn.Variable([2, 3, 8, 8])
    y = PF.convolution(x, 4, (3, 3), pad=(1, 1), stride=(2, 1))
    return {
        "Convolution": y.parent.arguments,
        "Reshape": F.reshape(y, (2, -1)).parent.arguments,
        "Sum": F.sum(y, axis=1).parent.arguments,
        "MaxPooling": F.max_pooling(x, (2, 2)).parent.arguments,
    }
