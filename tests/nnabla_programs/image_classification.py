"""A small nnabla image-classification program in the manner of nnabla's MNIST
example, written for dpnb's tests: its data set comes through ``download`` from
nnabla's data home, batches through a file-cached ``data_iterator_simple``, and it
uses named convolution and batch-normalization layers, ``Variable.reshape``,
weight decay, an image-tile monitor, ``nn.no_grad``, ``F.max(with_index=True)``,
``nn.forward_all`` and ``get_unlinked_variable``.

    python image_classification.py --make-data DIR   # writes DIR/templates.npz
    python image_classification.py --result DIR [-o MONITOR] [--cache DIR]
"""
import argparse
import json
import os

import numpy as np

import nnabla as nn
import nnabla.functions as F
import nnabla.parametric_functions as PF
import nnabla.solvers as S
from nnabla.ext_utils import get_extension_context
from nnabla.monitor import Monitor, MonitorImageTile, MonitorSeries
from nnabla.utils.data_iterator import data_iterator_simple
from nnabla.utils.data_source_loader import download

# Nothing listens here: the file must already be in the data home (~/nnabla_data).
URL = "http://127.0.0.1:9/dpnb-tests/templates.npz"
CLASSES, EXAMPLES, BATCH = 10, 320, 32


def make_data(directory):
    """Noisy 8x8 images of ten fixed random templates, with their labels."""
    gen = np.random.RandomState(5)
    templates = gen.rand(CLASSES, 1, 8, 8)
    labels = gen.randint(0, CLASSES, EXAMPLES)
    images = templates[labels] + 0.35 * gen.randn(EXAMPLES, 1, 8, 8)
    os.makedirs(directory, exist_ok=True)
    np.savez(os.path.join(directory, "templates.npz"), images=images.astype(np.float32),
             labels=labels.astype(np.int32))


def cnn(x, test=False):
    h = PF.convolution(x, 8, (3, 3), pad=(1, 1), name="c1")
    h = PF.batch_normalization(h, batch_stat=not test, name="c1")
    h = F.relu(F.max_pooling(h, (2, 2)))
    h = h.reshape((h.shape[0], -1))
    return PF.affine(h, CLASSES, name="fc")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--make-data")
    parser.add_argument("--result")
    parser.add_argument("-o", "--monitor-path", default="tmp.monitor")
    parser.add_argument("--cache", default=None)
    parser.add_argument("-i", "--iterations", type=int, default=100)
    args = parser.parse_args()
    if args.make_data:
        make_data(args.make_data)
        return

    nn.set_default_context(get_extension_context("cpu"))
    if args.cache:
        os.makedirs(args.cache, exist_ok=True)
    with np.load(download(URL)) as archive:
        images, labels = archive["images"], archive["labels"]
    train = data_iterator_simple(lambda i: (images[i], labels[i:i + 1]), EXAMPLES, BATCH,
                                 shuffle=True, rng=np.random.RandomState(1),
                                 with_file_cache=True, cache_dir=args.cache)

    x = nn.Variable((BATCH, 1, 8, 8))
    t = nn.Variable((BATCH, 1))
    pred = cnn(x)
    loss = F.mean(F.softmax_cross_entropy(pred, t))
    solver = S.Momentum(0.1, 0.9)
    solver.set_parameters(nn.get_parameters())
    monitor = Monitor(args.monitor_path)
    monitor_loss = MonitorSeries("Training loss", monitor, interval=10, verbose=False)
    monitor_images = MonitorImageTile("Training images", monitor, interval=50, num_images=16,
                                      verbose=False)

    losses = []
    for i in range(args.iterations):
        x.d, t.d = train.next()
        loss.forward(clear_no_need_grad=True)
        solver.zero_grad()
        loss.backward(clear_buffer=True)
        solver.weight_decay(1e-4)
        solver.update()
        losses.append(float(loss.d))
        monitor_loss.add(i, loss.d.copy())
        monitor_images.add(i, x.d.copy())

    vx = nn.Variable.from_numpy_array(images)
    with nn.no_grad():
        vpred = cnn(vx, test=True)
    _, index = F.max(vpred, axis=1, with_index=True)
    prob = F.softmax(vpred)
    nn.forward_all([index, prob], clear_buffer=True)
    frozen = pred.get_unlinked_variable(need_grad=False)

    os.makedirs(args.result, exist_ok=True)
    params = nn.get_parameters(grad_only=False)
    np.savez(os.path.join(args.result, "params.npz"), **{k: v.d for k, v in params.items()})
    with open(os.path.join(args.result, "result.json"), "w") as f:
        json.dump({"losses": losses, "accuracy": float(np.mean(index.d.ravel() == labels)),
                   "index_dtype": str(index.d.dtype), "prob_sums": prob.d.sum(axis=1).tolist(),
                   "parameters": list(params), "trainable": list(nn.get_parameters()),
                   "frozen": [frozen.need_grad, frozen.parent is None, frozen.shape],
                   "cache_files": sorted(os.listdir(args.cache)) if args.cache else []}, f)


if __name__ == "__main__":
    main()
