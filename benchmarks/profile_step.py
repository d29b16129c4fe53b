"""Where a training step's time goes: per phase (forward, backward, update) and per
function family, for dpnb and, where PyTorch is installed, for PyTorch on the identical
network (torch.profiler), side by side; one BLAS thread each.

dpnb's functions are timed by a ``function_pre_hook`` on forward and backward: the time
from one function's start to the next one's (the graph's own work between them
included), summed per function family; PyTorch's by ``torch.profiler``'s self CPU time
of each operator, put in the same families by name.  Each phase is also timed whole,
without hooks or profiler.  The networks are those of ``train_step.py`` (ResNet-23)
and ``models.py`` (LSTM, transformer).

    python benchmarks/profile_step.py [--model resnet23 lstm transformer] [--steps 5]
                                      [--runs 1] [--json PATH]

With ``--runs N`` each framework's worker runs N times, alternately, and every figure is
the median over the runs.
"""
from __future__ import annotations

import collections
import re
import statistics
import time

from models import dpnb_lstm, dpnb_transformer, torch_loss
from timing import (dpnb_adam_phases, output_of, run_worker, serve_as_worker, torch_installed,
                    worker_parser)
from train_step import dpnb_resnet23_loss, torch_resnet23_loss

MODELS = {
    "resnet23": (dpnb_resnet23_loss, torch_resnet23_loss),
    "lstm": (dpnb_lstm, lambda: torch_loss("lstm")),
    "transformer": (dpnb_transformer, lambda: torch_loss("transformer")),
}
PHASES = ("forward", "backward", "update")

# Families, by dpnb function name or PyTorch operator name (first match wins).
FAMILIES = [
    ("convolution", r"conv|im2col|col2im"),
    ("normalization", r"batch_?norm|layer_?norm|normali[sz]ation"),
    ("pooling", r"pool"),
    ("matrix product", r"affine|addmm|\bmm\b|^aten::mm|matmul|bmm|linear|einsum|baddbmm"),
    ("recurrent", r"lstm|rnn|gru"),
    ("loss", r"cross_?entropy|nll_loss|log_softmax|squared_error"),
    ("attention", r"attention|softmax"),
    ("activation", r"relu|tanh|sigmoid|gelu|elu|threshold|clamp"),
    ("optimizer", r"adam|_foreach|lerp|addcdiv|addcmul"),
    ("data movement", r"reshape|transpose|permute|concat|\bcat\b|slice|split|stack|copy|"
                      r"clone|contiguous|embed|index|gather|view|broadcast|expand|pad|"
                      r"select|narrow|unbind|empty|zero|fill"),
    ("reduction", r"sum|mean|max|min|reduce"),
    ("elementwise", r"add|sub|mul|div|pow|sqrt|exp|log|neg|identity|where|scalar|rsub"),
]


def family(name: str) -> str:
    """The family of a dpnb function (its class name) or a PyTorch operator name."""
    for label, pattern in FAMILIES:
        if re.search(pattern, name.lower()):
            return label
    return "other"


class PassTimer:
    """A ``function_pre_hook`` that charges the time from one function's start to the
    next one's to the first; ``finish()`` charges the rest of the pass to the last."""

    def __init__(self, seconds: collections.Counter):
        self.seconds = seconds
        self.current: str | None = None
        self.started = 0.0

    def __call__(self, fn) -> None:
        now = time.perf_counter()
        if self.current is not None:
            self.seconds[self.current] += now - self.started
        self.current, self.started = family(fn.name), now

    def finish(self) -> None:
        if self.current is not None:
            self.seconds[self.current] += time.perf_counter() - self.started
        self.current = None


def median_phases(phases: dict, steps: int) -> dict[str, float]:
    """Median seconds of each phase over ``steps`` steps run whole (no hooks), after one."""
    from dpnb.testing import time_in_turns

    return time_in_turns(phases, steps, warmup=1)


def dpnb_worker(model: str, steps: int) -> dict:
    import dpnb as nn

    phases = dpnb_adam_phases(MODELS[model][0]())
    whole = median_phases(phases, steps)
    by_family = {phase: collections.Counter() for phase in PHASES}
    for _ in range(steps):
        for phase, run in phases.items():
            timer = PassTimer(by_family[phase])
            nn.set_function_pre_hook("profile_step", timer)  # forward's and backward's
            started = time.perf_counter()
            try:
                run()
            finally:
                nn.unset_function_pre_hook("profile_step")
            if timer.current is None:  # no function ran: the solver's update
                by_family[phase]["optimizer"] += time.perf_counter() - started
            timer.finish()
    return {"phases_s": whole, "families_s": {phase: {k: v / steps for k, v in c.items()}
                                              for phase, c in by_family.items()}}


def torch_worker(model: str, steps: int) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(1)
    loss_fn, params = MODELS[model][1]()
    optimizer = torch.optim.Adam(params, lr=1e-3)
    value = None

    def forward():
        nonlocal value
        value = loss_fn()

    def backward():
        optimizer.zero_grad()
        value.backward()

    phases = {"forward": forward, "backward": backward, "update": optimizer.step}
    whole = median_phases(phases, steps)
    seconds = {phase: collections.Counter() for phase in PHASES}
    for _ in range(steps):
        for phase, run in phases.items():
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                run()
            for event in prof.key_averages():
                seconds[phase][family(event.key)] += event.self_cpu_time_total / 1e6 / steps
    return {"phases_s": whole, "families_s": {p: dict(c) for p, c in seconds.items()},
            "torch": torch.__version__}


def median_profile(runs: list[dict]) -> dict:
    """Per phase, and per phase and family, the median over the runs of one framework."""
    families = {phase: set().union(*(r["families_s"][phase] for r in runs)) for phase in PHASES}
    return {"phases_s": {p: statistics.median(r["phases_s"][p] for r in runs) for p in PHASES},
            "families_s": {p: {f: statistics.median(r["families_s"][p].get(f, 0.0) for r in runs)
                               for f in families[p]} for p in PHASES}}


def table(model: str, results: dict) -> list[str]:
    """Milliseconds and shares per phase, then per family and phase, framework beside
    framework."""
    names = list(results)
    lines = [f"{model}: " + ", ".join(
        f"{name} step {1e3 * sum(r['phases_s'].values()):.1f} ms" for name, r in results.items())]
    header = f"{'':28}" + "".join(f"{name + ' ms':>12}{'share':>7}" for name in names)
    lines.append(header)
    for phase in PHASES:
        row = f"{phase:28}"
        for r in results.values():
            total = sum(r["phases_s"].values())
            row += f"{1e3 * r['phases_s'][phase]:12.1f}{r['phases_s'][phase] / total:7.0%}"
        lines.append(row)
    keys = sorted({(phase, fam) for r in results.values() for phase in PHASES
                   for fam in r["families_s"][phase]},
                  key=lambda k: -max(r["families_s"][k[0]].get(k[1], 0) for r in results.values()))
    for phase, fam in keys:
        row = f"  {phase + ': ' + fam:26}"
        for r in results.values():
            counted = sum(sum(c.values()) for c in r["families_s"].values())
            seconds = r["families_s"][phase].get(fam, 0.0)
            row += f"{1e3 * seconds:12.1f}{seconds / counted:7.0%}"
        lines.append(row)
    return lines


def main() -> None:
    args = worker_parser(__doc__, "profile_step", steps=5, runs=1, models=MODELS).parse_args()
    output = output_of(args)
    if serve_as_worker(args, dpnb_worker, torch_worker):
        return
    frameworks = ["dpnb"] + (["torch"] if torch_installed() else [])
    result = {}
    for model in args.model:
        runs: dict[str, list[dict]] = {name: [] for name in frameworks}
        for _ in range(args.runs):
            for name in frameworks:
                runs[name].append(run_worker(__file__, name, model, "--steps", str(args.steps)))
        result[model] = {name: median_profile(rs) for name, rs in runs.items()}
        print("\n".join(table(model, result[model])), end="\n\n")
    if "torch" not in frameworks:
        print("PyTorch is not installed: `pip install torch==2.13.0` adds the reference")
    output.write(result, indent=2)


if __name__ == "__main__":
    main()
