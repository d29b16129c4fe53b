"""Training steps of an LSTM language model and a small transformer encoder (Adam, one
BLAS thread): dpnb against PyTorch's CPU build on the identical network.

LSTM: embedding 2000 -> 128, two LSTM layers of 256, affine back to 2000 words,
softmax cross-entropy over 32 steps x batch 16.  Transformer: two post-norm encoder
layers (PF.transformer_encode; torch's TransformerEncoderLayer), width 128, 4 heads,
feed-forward 256, no dropout, sequence 32 x batch 16, mean over the sequence, then
10 classes.  Each framework runs in its own process, several times alternately; the
table shows the medians of the per-run median step times; ``--record`` writes them to
benchmarks/results/models.json, ``--json PATH`` to PATH.

    python benchmarks/models.py [--steps 10] [--runs 3] [--model lstm transformer]
                                [--json PATH] [--record]
"""
from __future__ import annotations

import statistics

from timing import (dpnb_adam_step_seconds, output_of, peak_rss_mib, rss_mib, run_worker,
                    serve_as_worker, torch_adam_step, torch_installed, worker_parser)

from dpnb.testing import median_seconds

STEPS_T, BATCH = 32, 16
VOCAB, EMBED, HIDDEN, LSTM_LAYERS = 2000, 128, 256, 2
WIDTH, HEADS, FEEDFORWARD, ENCODER_LAYERS, CLASSES = 128, 4, 256, 2, 10


def dpnb_lstm():
    import numpy as np
    import dpnb as nn
    import dpnb.functions as F
    import dpnb.parametric_functions as PF

    rng = np.random.RandomState(0)
    words, targets = nn.Variable((STEPS_T, BATCH)), nn.Variable((STEPS_T, BATCH, 1))
    words.d = rng.randint(0, VOCAB, words.shape)
    targets.d = rng.randint(0, VOCAB, targets.shape)
    h0 = nn.Variable((LSTM_LAYERS, 1, BATCH, HIDDEN))
    c0 = nn.Variable((LSTM_LAYERS, 1, BATCH, HIDDEN))
    y, _, _ = PF.lstm(PF.embed(words, VOCAB, EMBED), h0, c0, num_layers=LSTM_LAYERS)
    logits = PF.affine(y, VOCAB, base_axis=2)
    return F.mean(F.softmax_cross_entropy(logits, targets, axis=2))


def dpnb_transformer():
    import numpy as np
    import dpnb as nn
    import dpnb.functions as F
    import dpnb.parametric_functions as PF

    rng = np.random.RandomState(0)
    src, label = nn.Variable((STEPS_T, BATCH, WIDTH)), nn.Variable((BATCH, 1))
    src.d = rng.randn(*src.shape)
    label.d = rng.randint(0, CLASSES, label.shape)
    h = src
    for layer in range(ENCODER_LAYERS):
        h = PF.transformer_encode(h, WIDTH, HEADS, dim_feedforward=FEEDFORWARD, dropout=0.0,
                                  name=f"encoder{layer}")
    logits = PF.affine(F.mean(h, axis=0), CLASSES)
    return F.mean(F.softmax_cross_entropy(logits, label))


def dpnb_worker(model: str, steps: int) -> dict:
    from dpnb import kernels

    kernels.load()  # Numba's libraries before the baseline, as PyTorch's are in its worker
    base = rss_mib()
    loss = {"lstm": dpnb_lstm, "transformer": dpnb_transformer}[model]()
    return {"step_s": dpnb_adam_step_seconds(loss, steps), "peak_mib": peak_rss_mib() - base}


def torch_loss(model: str):
    """The PyTorch twin of ``dpnb_lstm`` / ``dpnb_transformer`` as ``(loss function,
    parameters)``."""
    import torch
    from torch import nn as tnn

    torch.manual_seed(0)
    if model == "lstm":
        embed, lstm = tnn.Embedding(VOCAB, EMBED), tnn.LSTM(EMBED, HIDDEN, LSTM_LAYERS)
        head = tnn.Linear(HIDDEN, VOCAB)
        modules = [embed, lstm, head]
        words = torch.randint(0, VOCAB, (STEPS_T, BATCH))
        targets = torch.randint(0, VOCAB, (STEPS_T * BATCH,))

        def loss():
            logits = head(lstm(embed(words))[0])
            return tnn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets)
    else:
        layer = tnn.TransformerEncoderLayer(WIDTH, HEADS, FEEDFORWARD, dropout=0.0)
        encoder = tnn.TransformerEncoder(layer, ENCODER_LAYERS, enable_nested_tensor=False)
        head = tnn.Linear(WIDTH, CLASSES)
        modules = [encoder, head]
        src = torch.randn(STEPS_T, BATCH, WIDTH)
        label = torch.randint(0, CLASSES, (BATCH,))

        def loss():
            return tnn.functional.cross_entropy(head(encoder(src).mean(0)), label)

    return loss, [p for m in modules for p in m.parameters()]


def torch_worker(model: str, steps: int) -> dict:
    import torch

    torch.set_num_threads(1)
    base = rss_mib()
    step = torch_adam_step(*torch_loss(model))
    return {"step_s": median_seconds(step, steps, warmup=2), "peak_mib": peak_rss_mib() - base,
            "torch": torch.__version__}


def main() -> None:
    args = worker_parser(__doc__, "models", models=("lstm", "transformer")).parse_args()
    output = output_of(args)
    if serve_as_worker(args, dpnb_worker, torch_worker):
        return

    frameworks = ["dpnb"] + (["torch"] if torch_installed() else [])
    result = {}
    print(f"training step, sequence {STEPS_T} x batch {BATCH}, Adam, 1 thread, "
          f"median of {args.runs} runs x {args.steps} steps")
    print(f"{'model':12} " + " ".join(f"{name + ' ms':>9}" for name in frameworks)
          + ("   dpnb / torch (target <= 1.0)" if "torch" in frameworks else ""))
    for model in args.model:
        runs = {name: [] for name in frameworks}
        for _ in range(args.runs):
            for name in frameworks:
                runs[name].append(run_worker(__file__, name, model, "--steps", str(args.steps)))
        medians = {name: statistics.median(r["step_s"] for r in rs) for name, rs in runs.items()}
        memory = {name: statistics.median(r["peak_mib"] for r in rs) for name, rs in runs.items()}
        result[model] = {"step_s": medians, "peak_mib": memory, "runs": runs}
        line = f"{model:12} " + " ".join(f"{1e3 * medians[name]:9.1f}" for name in frameworks)
        if "torch" in medians:
            result[model]["ratio_time"] = medians["dpnb"] / medians["torch"]
            result[model]["ratio_memory"] = memory["dpnb"] / memory["torch"]
            line += (f"   {result[model]['ratio_time']:.2f}x (peak memory "
                     f"{result[model]['ratio_memory']:.2f}x)")
        print(line)
    if "torch" not in frameworks:
        print("PyTorch is not installed: `pip install torch==2.13.0` adds the reference")
    output.write(result, indent=2)


if __name__ == "__main__":
    main()
