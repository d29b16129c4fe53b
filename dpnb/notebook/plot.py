"""Plots of per-rank values with matplotlib: gradients before and after all_reduce, losses."""
from __future__ import annotations

import numpy as np


def _figure(rows: int, columns: int, width: float = 4.0, height: float = 2.2):
    """A figure that IPython displays when returned, without pyplot showing it a second time."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, columns, figsize=(width * columns, height * rows),
                             squeeze=False)
    plt.close(fig)
    return fig, axes


def plot_grads(before: dict, after: dict | None = None, names: list[str] | None = None,
               max_values: int = 200):
    """One row per parameter, one column per stage: each rank's flattened gradient as a line.

    ``before``/``after`` are ``gather_grads()`` results (rank -> {name: array});
    only the first ``max_values`` entries of each gradient are drawn."""
    stages = [("before all_reduce", before)] + ([("after all_reduce", after)] if after else [])
    ranks = sorted(before)
    names = names or list(before[ranks[0]])
    fig, axes = _figure(len(names), len(stages))
    for column, (title, gathered) in enumerate(stages):
        for row, name in enumerate(names):
            ax = axes[row][column]
            for rank in ranks:
                values = np.asarray(gathered[rank][name], dtype=np.float64).reshape(-1)[:max_values]
                ax.plot(values, marker=".", linewidth=0.8, label=f"rank {rank}", alpha=0.8)
            ax.set_title(f"{name} ({title})", fontsize=9)
            ax.tick_params(labelsize=7)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_losses(losses: dict, title: str = "loss"):
    """Loss against step, one line per rank; ``losses`` maps rank -> [(step, loss), ...]."""
    fig, axes = _figure(1, 1, width=6.0, height=3.0)
    ax = axes[0][0]
    for rank in sorted(losses):
        points = losses[rank]
        if points:
            steps, values = zip(*points)
            ax.plot(steps, values, label=f"rank {rank}")
    ax.set_xlabel("step")
    ax.set_ylabel(title)
    if losses:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
