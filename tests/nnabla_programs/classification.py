"""A small nnabla training program in nnabla's own idiom (imports, data source, data
iterators sliced per rank, communicator_util, monitors, F.sink, Variable.apply),
written for dpnb's tests and run there by ``dpnb run``, alone and under mpiexec.

It classifies two Gaussian blobs with a two-layer perceptron and writes, per
rank, what the tests check: the data indices it trained on, the losses, the
first step's gradients before and after their exchange, the final parameters
and the test accuracy."""
import argparse
import json
import os

import numpy as np

import nnabla as nn
import nnabla.functions as F
import nnabla.parametric_functions as PF
import nnabla.solvers as S
from nnabla.ext_utils import get_extension_context
from nnabla.logger import logger
from nnabla.monitor import Monitor, MonitorSeries, MonitorTimeElapsed
from nnabla.utils.communicator_util import create_communicator, single_or_rankzero
from nnabla.utils.data_iterator import data_iterator, data_iterator_simple
from nnabla.utils.data_source import DataSource


def blobs(n, seed):
    """``n`` points of two Gaussian blobs, 3 apart, and their labels."""
    gen = np.random.RandomState(seed)
    labels = gen.randint(0, 2, n)
    points = (gen.randn(n, 2) + 3 * labels[:, None] - 1.5).astype(np.float32)
    return points, labels


class BlobsDataSource(DataSource):
    """The training blobs; each example carries its index, so shards can be checked."""

    def __init__(self, n, shuffle=False, rng=None):
        super(BlobsDataSource, self).__init__(shuffle=shuffle, rng=rng)
        self._points, self._labels = blobs(n, seed=7)
        self._size = n
        self._variables = ("x", "y", "index")
        self.rng = rng if rng is not None else np.random.RandomState(313)
        self.reset()

    def _get_data(self, position):
        i = self._indexes[position]
        return self._points[i], np.array([self._labels[i]]), np.array([i])

    def reset(self):
        if self._shuffle:
            self._indexes = self.rng.permutation(self._size)
        else:
            self._indexes = np.arange(self._size)
        super(BlobsDataSource, self).reset()


def mlp(x):
    h = F.relu(PF.affine(x, 16, name="fc1"))
    return PF.affine(h, 2, name="fc2")


def gradients():
    return {name: p.g.copy() for name, p in nn.get_parameters().items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-c", "--context", default="cpu")
    parser.add_argument("-i", "--iterations", type=int, default=60)
    parser.add_argument("-b", "--batch-size", type=int, default=16)
    parser.add_argument("-o", "--monitor-path", default="tmp.monitor")
    parser.add_argument("--exchange", choices=["all_reduce", "callback"], default="all_reduce")
    parser.add_argument("--result", required=True)
    args = parser.parse_args()

    ctx = get_extension_context(args.context)
    nn.set_default_context(ctx)
    comm = create_communicator(extension_module=args.context)
    rank, size = (comm.rank, comm.size) if comm else (0, 1)
    logger.info("rank %d of %d", rank, size)

    train = data_iterator(BlobsDataSource(512, shuffle=True), args.batch_size,
                          with_memory_cache=False)
    if comm:
        train = train.slice(rng=None, num_of_slices=size, slice_pos=rank)
    test_points, test_labels = blobs(200, seed=8)
    test = data_iterator_simple(lambda i: (test_points[i], test_labels[i:i + 1]), 200, 200,
                                shuffle=False, with_file_cache=False)

    x = nn.Variable((args.batch_size, 2))
    t = nn.Variable((args.batch_size, 1))
    pred = mlp(x)
    loss = F.mean(F.softmax_cross_entropy(pred, t)).apply(persistent=True)
    error = F.mean(F.top_n_error(pred, t)).apply(persistent=True)
    solver = S.Adam(0.05)
    solver.set_parameters(nn.get_parameters())

    if single_or_rankzero():
        monitor = Monitor(args.monitor_path)
        monitor_loss = MonitorSeries("Training loss", monitor, interval=10)
        monitor_error = MonitorSeries("Training error", monitor, interval=10)
        monitor_time = MonitorTimeElapsed("Training time", monitor, interval=20)

    seen, losses, first = [], [], {}
    for i in range(args.iterations):
        x.d, t.d, index = train.next()
        seen += index.ravel().tolist()
        F.sink(loss, error).forward()
        solver.zero_grad()
        if i == 0:
            loss.backward()
            first["local"] = gradients()
            solver.zero_grad()
        if comm and args.exchange == "callback":
            loss.backward(clear_buffer=True, communicator_callbacks=comm.get_all_reduce_callback())
        else:
            loss.backward(clear_buffer=True)
            if comm:
                comm.all_reduce([p.grad for p in nn.get_parameters().values()], division=True)
        if i == 0:
            first["exchanged"] = gradients()
        solver.update()
        losses.append(float(loss.d))
        if single_or_rankzero():
            monitor_loss.add(i, loss.d.copy())
            monitor_error.add(i, error.d.copy())
            monitor_time.add(i)

    vx = nn.Variable((200, 2))
    vpred = mlp(vx)
    vx.d, vt = test.next()
    vpred.forward(clear_buffer=True)
    accuracy = float(np.mean(vpred.d.argmax(axis=1) == vt.ravel()))

    os.makedirs(args.result, exist_ok=True)
    arrays = {f"{kind}/{name}": g for kind, grads in first.items() for name, g in grads.items()}
    arrays.update({f"param/{name}": p.d for name, p in nn.get_parameters().items()})
    np.savez(os.path.join(args.result, f"rank{rank}.npz"), **arrays)
    with open(os.path.join(args.result, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "size": size, "seen": seen, "losses": losses,
                   "accuracy": accuracy, "train_size": train.size}, f)


if __name__ == "__main__":
    main()
