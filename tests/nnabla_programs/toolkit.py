"""A small nnabla program in nnabla's own idiom that goes through its toolkit, written
for dpnb's tests and run there by ``dpnb run``: an image data set written with
``image_utils`` and read through a CSV data iterator, a ``Module`` model (``ConvBn``
and ``PF.affine``) trained with a learning-rate scheduler, solver and function hooks,
recomputation and buffer clearing, a GAN-style frozen intermediate, packed
sequences through an LSTM, ``inspection.pprint``, a saved and reloaded ``.nnp``
network, and solver states in a protobuf message and a file.

    python toolkit.py --result DIR      # writes DIR/result.json and DIR/arrays.npz
"""
import argparse
import contextlib
import io
import json
import os
from collections import Counter

import numpy as np

import nnabla as nn
import nnabla.functions as F
import nnabla.logger as logger
import nnabla.parametric_functions as PF
import nnabla.solvers as S
from nnabla.core.module import Module
from nnabla.core.modules import ConvBn
from nnabla.utils import image_utils, nnabla_pb2
from nnabla.utils.data_iterator import data_iterator_csv_dataset
from nnabla.utils.inspection import pprint
from nnabla.utils.learning_rate_scheduler import StepScheduler
from nnabla.utils.load import load
from nnabla.utils.nnp_graph import NnpLoader
from nnabla.utils.rnn import pack_sequence, pad_packed_sequence
from nnabla.utils.save import save

IMAGES, BATCH, SIZE = 8, 4, 6


def write_data_set(directory):
    """``IMAGES`` small RGB PNG files, their label the brighter half, listed in a CSV file."""
    gen = np.random.RandomState(3)
    os.makedirs(os.path.join(directory, "images"), exist_ok=True)
    rows = ["x:image,y:label"]
    for i in range(IMAGES):
        label = i % 2
        image = gen.randint(0, 128, (SIZE, SIZE, 3)) + 100 * label
        name = os.path.join("images", "%d.png" % i)
        image_utils.imsave(os.path.join(directory, name), image.astype(np.uint8))
        rows.append("%s,%d" % (name, label))
    path = os.path.join(directory, "train.csv")
    with open(path, "w") as f:
        f.write("\n".join(rows) + "\n")
    return path


class Classifier(Module):
    """A tanh that backward recomputes (the convolution's gradient needs it), a
    convolution, batch normalization and ReLU block, pooling, and an affine layer to
    two classes."""

    def __init__(self):
        self.block = ConvBn(4, 3, act=F.relu)

    def call(self, x, training=True):
        with nn.recompute():
            h = F.tanh(x * 2.0 - 1.0)
        h = self.block(h, training)
        h = F.average_pooling(h, (2, 2))
        return PF.affine(h, 2, name="fc")


def train(model, train_iter, steps):
    """Train ``model`` with Momentum, a step scheduler and counting hooks; the losses,
    the learning rates used and how often the hooks ran."""
    x = nn.Variable((BATCH, 3, SIZE, SIZE))
    t = nn.Variable((BATCH, 1))
    logits = model(x)
    loss = F.mean(F.softmax_cross_entropy(logits, t))
    solver = S.Momentum(0.1, 0.9)
    solver.set_parameters(model.get_parameters(grad_only=True))
    scheduler = StepScheduler(0.1, 0.5, [3, 6])
    calls = Counter()
    nn.set_solver_pre_hook("count", lambda: calls.update(["global"]))
    losses, rates = [], []
    for i in range(steps):
        x.d, t.d = train_iter.next()
        loss.forward(clear_no_need_grad=True)
        solver.zero_grad()
        loss.backward(clear_buffer=True)
        rate = scheduler.get_learning_rate(i)
        solver.set_learning_rate(rate)
        solver.update(update_pre_hook=lambda: calls.update(["update"]))
        losses.append(float(loss.d))
        rates.append(float(solver.learning_rate()))
    nn.unset_solver_pre_hook("count")
    return solver, losses, rates, dict(calls)


def frozen_generator():
    """A GAN discriminator step: the generator's output is cut off with ``need_grad``,
    so only the discriminator's parameters get gradients; the input is sliced."""
    z = nn.Variable.from_numpy_array(np.linspace(-1, 1, 12).reshape(2, 6).astype(np.float32))
    with nn.parameter_scope("gen"):
        fake = F.tanh(PF.affine(z[:, :4], 3, w_init=np.full((4, 3), 0.25, np.float32)))
    fake.need_grad = False
    with nn.parameter_scope("dis"):
        score = PF.affine(fake, 1, w_init=np.array([[0.5], [-1.0], [2.0]], np.float32))
    loss = F.mean(F.sigmoid_cross_entropy(score, F.constant(1, score.shape)))
    params = nn.get_parameters()
    for p in params.values():
        p.grad.zero()
    loss.forward()
    loss.backward()
    return {name: p.g.copy() for name, p in params.items() if name.startswith(("gen", "dis"))}


def packed_lstm():
    """Three sequences of lengths 3, 2 and 1 packed, padded back and run through an LSTM;
    the padded input, the lengths and the LSTM's outputs."""
    steps = [np.arange(n * 2, dtype=np.float32).reshape(n, 2) / 4 - 0.5 for n in (3, 2, 1)]
    with nn.auto_forward():
        packed = pack_sequence([nn.Variable.from_numpy_array(s) for s in steps])
        padded, lengths = pad_packed_sequence(packed)
        h0 = nn.Variable.from_numpy_array(np.zeros((1, 1, 3, 3), np.float32))
        c0 = nn.Variable.from_numpy_array(np.zeros((1, 1, 3, 3), np.float32))
        w0 = np.linspace(-0.6, 0.6, 4 * 3 * 5).reshape(1, 4, 3, 5).astype(np.float32)
        b = np.linspace(-0.1, 0.1, 12).reshape(1, 1, 4, 3).astype(np.float32)
        with nn.parameter_scope("lstm"):
            y, hn, cn = PF.lstm(padded, h0, c0, w0_init=w0, b_init=b)
    return {"packed": packed.data.d.copy(), "batch_sizes": packed.batch_sizes.d.copy(),
            "padded": padded.d.copy(), "lengths": lengths.d.copy(), "lstm_y": y.d.copy(),
            "lstm_h": hn.d.copy(), "lstm_c": cn.d.copy()}


def printed_graph():
    """What ``pprint`` prints for a small seeded graph after its forward."""
    x = nn.Variable.from_numpy_array(np.array([[-1, -0.5, 0.25], [0.5, 1, 1.5]], np.float32))
    with nn.parameter_scope("show"):
        y = F.mean(F.relu(PF.affine(x, 2, w_init=np.full((3, 2), 0.5, np.float32))))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        pprint(y, forward=True, summary=True)
    return out.getvalue()


def save_and_reload(model, directory, data):
    """Save the model's test-mode network to .nnp and run it back through ``load`` and
    ``NnpLoader``; the outputs of the network here, and of both loaded ones."""
    x = nn.Variable((BATCH, 3, SIZE, SIZE))
    y = F.softmax(model(x, training=False))
    path = os.path.join(directory, "classifier.nnp")
    for name, param in model.get_parameters(grad_only=False).items():
        nn.parameter.set_parameter(name, param)  # save finds parameters in the global scope
    save(path, {"networks": [{"name": "classifier", "batch_size": BATCH,
                              "outputs": {"y": y}, "names": {"x": x}}],
                "executors": [{"name": "runtime", "network": "classifier",
                               "data": ["x"], "output": ["y"]}]})
    x.d = data
    y.forward()
    info = load([path])
    network = info.executors["runtime"].network
    loaded_x = network.variables["x"].variable_instance
    loaded_y = network.variables["y"].variable_instance
    loaded_x.d = data
    loaded_y.forward()
    graph = NnpLoader(path).get_network("classifier", batch_size=BATCH)
    graph.inputs["x"].d = data
    graph.outputs["y"].forward()
    return {"here": y.d.copy(), "load": loaded_y.d.copy(), "nnp_graph": graph.outputs["y"].d.copy()}


def solver_states(solver, params, directory):
    """The solver's states through a protobuf ``Optimizer`` message, and read back by a
    new solver from the .h5 file ``save_states`` wrote."""
    message = nnabla_pb2.Optimizer()
    solver.set_states_to_protobuf(message)
    states = {}
    for name, state in message.solver.states.items():
        for key, value in state.state_parameter.items():
            states["proto/%s/%s" % (name, key)] = np.array(value.data, np.float32).reshape(
                value.shape.dim)
        states["t/%s" % name] = np.array(state.t)
    path = os.path.join(directory, "states.h5")
    solver.save_states(path)
    reloaded = S.Momentum(0.1, 0.9)
    reloaded.set_parameters(params)
    reloaded.load_states(path)
    for name, state in reloaded.get_states().items():
        for key, value in state.pstate.items():
            states["h5/%s/%s" % (name, key)] = value.d.copy()
    return states


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--result", required=True)
    parser.add_argument("-i", "--iterations", type=int, default=8)
    args = parser.parse_args()
    os.makedirs(args.result, exist_ok=True)
    logger.info("nnabla %s", nn.__version__)
    nn.seed(313)

    csv_path = write_data_set(os.path.join(args.result, "data"))
    first = image_utils.imread(os.path.join(args.result, "data", "images", "0.png"))
    small = image_utils.imresize(first, (3, 3))
    train_iter = data_iterator_csv_dataset(csv_path, BATCH, shuffle=False,
                                           with_file_cache=False)

    counts = Counter()
    nn.set_function_post_hook("count", lambda f: counts.update([f.info.type_name]))
    model = Classifier()
    solver, losses, rates, hook_calls = train(model, train_iter, args.iterations)
    nn.unset_function_post_hook("count")

    arrays = {"image": first, "resized": small}
    arrays.update({"param/" + k: v.d.copy() for k, v in model.get_parameters().items()})
    arrays.update({"gan/" + k: v for k, v in frozen_generator().items()})
    arrays.update(packed_lstm())
    data, labels = train_iter.next()
    arrays.update({"csv/x": data, "csv/y": labels})
    arrays.update({"out/" + k: v for k, v in save_and_reload(model, args.result, data).items()})
    states = solver_states(solver, model.get_parameters(grad_only=True), args.result)
    arrays.update(states)

    np.savez(os.path.join(args.result, "arrays.npz"), **arrays)
    with open(os.path.join(args.result, "result.json"), "w") as f:
        json.dump({"losses": losses, "rates": rates, "hook_calls": hook_calls,
                   "function_counts": dict(sorted(counts.items())),
                   "parameters": list(model.get_parameters()), "pprint": printed_graph(),
                   "version_is_text": isinstance(nn.__version__, str),
                   "iterator": [train_iter.size, train_iter.variables]}, f, indent=1)


if __name__ == "__main__":
    main()
