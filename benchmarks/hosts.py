"""dpnb across two test hosts (network namespaces on this machine joined by veth links,
``dpnb.testing.TestHosts``), 1 rank on each, all traffic over TCP on the links.

1. all_reduce of ResNet-23's gradients in flat storage (one list of views of one flat
   buffer, as a training step passes them) against raw mpi4py ``Allreduce(IN_PLACE)``
   of one buffer of the same bytes, in the same run, timed in shuffled turns of
   ``--block`` calls back to back (sustained throughput, as a training loop calls it;
   ``--block 1`` times single calls, each after a barrier): the sum, and the mean
   against the raw sum followed by ``x *= 1/n`` (how dpnb takes it).  Target: dpnb's
   throughput at least 0.9x raw.  dpnb's agreement check is one more collective before
   the data (a persistent ``Allgather`` of 256-byte rows), so its checked sum is also
   set against raw mpi4py making the same two calls, and its sum without the check
   (``check_agreement=False``) against the raw ``Allreduce`` alone.
2. ResNet-23's training step per rank (forward, backward, all_reduce of the mean
   gradients, momentum update; one BLAS thread), across the hosts against 2 ranks on one
   host (shared memory), runs taking turns.

Each figure is the median over ``--runs`` runs of each run's median (the slowest rank's
time per call).  Needs root (it makes the test hosts).

    python benchmarks/hosts.py [--runs 5] [--reps 7] [--allreduce-reps 200] [--block 10]
        [--batch-size 32] [--nmaps 64] [--json PATH] [--record]

``--record`` writes the results to benchmarks/results/hosts.json
(hosts-nmaps<N>-block<B>.json where those differ from the defaults), ``--json PATH`` to
PATH."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from timing import add_output_options, output_of

from dpnb.testing import TestHosts, hosts_unavailable, run_script, time_in_turns

RUN_TIMEOUT = 1800  # seconds for one run on all ranks
RESULT_MARK = "RESULT "
LABELS = {"dpnb_sum": "dpnb all_reduce, sum", "raw_sum": "raw Allreduce",
          "dpnb_mean": "dpnb all_reduce, mean", "raw_mean": "raw Allreduce + x 1/n",
          "raw_checked_sum": "raw Allgather(256 B) + Allreduce",
          "dpnb_sum_unchecked": "dpnb sum, check_agreement=False"}
NCLS = 10


def resnet23(batch_size: int, nmaps: int):
    """ResNet-23's training loss on one random batch, and its momentum solver."""
    import dpnb as nn
    import dpnb.functions as F
    import dpnb.solvers as S
    from dpnb.models import resnet23_prediction

    rng = np.random.RandomState(0)
    image, label = nn.Variable((batch_size, 3, 32, 32)), nn.Variable((batch_size, 1))
    image.d = rng.randn(batch_size, 3, 32, 32)
    label.d = rng.randint(0, NCLS, (batch_size, 1))
    loss = F.mean(F.softmax_cross_entropy(
        resnet23_prediction(image, ncls=NCLS, nmaps=nmaps), label))
    solver = S.Momentum(0.01, 0.9)
    solver.set_parameters(nn.get_parameters())
    return loss, solver


def all_reduce_child(args) -> dict:
    """On each rank: dpnb's all_reduce of the flat gradients against raw Allreduce."""
    from mpi4py import MPI

    import dpnb as nn
    import dpnb.communicators as C

    comm = C.MultiProcessCommunicator(nn.Context())
    comm.init()
    loss, solver = resnet23(2, args.nmaps)  # only the parameters' shapes matter here
    loss.forward()
    solver.zero_grad()
    loss.backward()
    grads = [p.grad for p in nn.get_parameters().values()]
    nbytes = sum(g.size for g in grads) * 4
    world = MPI.COMM_WORLD
    raw_buffer = np.ones(nbytes // 4, np.float32)
    scale = np.float32(1 / world.size)
    row, rows = np.zeros(256, np.uint8), np.zeros((world.size, 256), np.uint8)
    raw_check = world.Allgather_init(row, rows)

    def raw_sum():
        world.Allreduce(MPI.IN_PLACE, raw_buffer, op=MPI.SUM)

    def raw_mean():
        raw_sum()
        np.multiply(raw_buffer, scale, out=raw_buffer)

    def raw_checked_sum():
        raw_check.Start()
        raw_check.Wait()
        raw_sum()

    def unchecked_sum():
        comm.check_agreement = False
        comm.all_reduce(grads, division=False)
        comm.check_agreement = True

    forms = {"dpnb_sum": lambda: comm.all_reduce(grads, division=False), "raw_sum": raw_sum,
             "dpnb_mean": lambda: comm.all_reduce(grads, division=True), "raw_mean": raw_mean,
             "raw_checked_sum": raw_checked_sum, "dpnb_sum_unchecked": unchecked_sum}
    t = time_in_turns({name: _repeated(form, args.block) for name, form in forms.items()},
                      args.allreduce_reps, warmup=10, world=world, shuffle=True)
    raw_check.Free()
    return {"bytes": nbytes, "tensors": len(grads), "segment_bytes": comm.segment_bytes,
            **{f"{k}_s": v / args.block for k, v in t.items()}}


def _repeated(form, times: int):
    """``form`` called ``times`` times back to back."""
    def calls():
        for _ in range(times):
            form()
    return calls


def step_child(args) -> dict:
    """On each rank: the median time of one data-parallel training step."""
    from mpi4py import MPI

    import dpnb as nn
    import dpnb.communicators as C

    comm = C.MultiProcessCommunicator(nn.Context())
    comm.init()
    loss, solver = resnet23(args.batch_size, args.nmaps)
    grads = [p.grad for p in nn.get_parameters().values()]

    def step():
        loss.forward(clear_no_need_grad=True)
        solver.zero_grad()
        loss.backward(clear_buffer=True)
        comm.all_reduce(grads, division=True)
        solver.update()

    t = time_in_turns({"step": step}, args.reps, warmup=2, world=MPI.COMM_WORLD)
    return {"step_s": t["step"]}


def child(args) -> None:
    from mpi4py import MPI

    result = {"allreduce": all_reduce_child, "step": step_child}[args.child](args)
    if MPI.COMM_WORLD.rank == 0:
        print(RESULT_MARK + json.dumps(result), flush=True)


def result_of(run) -> dict:
    """The JSON a child run's rank 0 printed, or exit with the run's output."""
    if run.returncode != 0:
        sys.exit(f"{' '.join(run.command)} {run.ending}:\n{run.output}")
    line = next(line for line in run.output.splitlines() if line.startswith(RESULT_MARK))
    return json.loads(line[len(RESULT_MARK):])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--reps", type=int, default=7, help="timed training steps per run")
    p.add_argument("--allreduce-reps", type=int, default=200,
                   help="timed turns of each all_reduce form per run")
    p.add_argument("--block", type=int, default=10,
                   help="all_reduce calls back to back in one timed turn")
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--nmaps", type=int, default=64)
    p.add_argument("--child", choices=["allreduce", "step"], help=argparse.SUPPRESS)
    add_output_options(p, "hosts")
    args = p.parse_args()
    output = output_of(args)
    if args.child:
        child(args)
        return
    reason = hosts_unavailable()
    if reason is not None:
        sys.exit(f"benchmarks/hosts.py needs test hosts: {reason}")
    options = ["--reps", str(args.reps), "--allreduce-reps", str(args.allreduce_reps),
               "--block", str(args.block),
               "--batch-size", str(args.batch_size), "--nmaps", str(args.nmaps)]
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load_start = os.getloadavg()
    runs: dict[str, list] = {"allreduce": [], "step_hosts": [], "step_one_host": []}
    link_bytes = []
    with TestHosts(2) as hosts:
        for run in range(args.runs):
            before = hosts.link_bytes()
            runs["allreduce"].append(result_of(hosts.run_script(
                __file__, "--child", "allreduce", *options, timeout=RUN_TIMEOUT)))
            after = hosts.link_bytes()
            link_bytes.append(min(after[h] - before[h] for h in hosts.names))
            steps = {"step_hosts": lambda: hosts.run_script(
                         __file__, "--child", "step", *options, timeout=RUN_TIMEOUT),
                     "step_one_host": lambda: run_script(
                         2, __file__, "--child", "step", *options, timeout=RUN_TIMEOUT)}
            for key in sorted(steps, reverse=run % 2 == 1):  # each goes first in turn
                runs[key].append(result_of(steps[key]()))
            ar, step = runs["allreduce"][-1], runs["step_hosts"][-1]["step_s"]
            print(f"run {run + 1}/{args.runs}: all_reduce sum {ar['dpnb_sum_s'] * 1e3:.2f} ms "
                  f"(raw {ar['raw_sum_s'] * 1e3:.2f} ms), step across hosts {step:.3f} s, on "
                  f"one host {runs['step_one_host'][-1]['step_s']:.3f} s", file=sys.stderr,
                  flush=True)
    median = {key: {name: statistics.median(r[name] for r in rows) for name in rows[0]
                    if name.endswith("_s")} for key, rows in runs.items()}
    ar = median["allreduce"]
    nbytes, tensors = runs["allreduce"][0]["bytes"], runs["allreduce"][0]["tensors"]
    segment = runs["allreduce"][0]["segment_bytes"]
    summary = {"sum_dpnb_vs_raw_throughput": ar["raw_sum_s"] / ar["dpnb_sum_s"],
               "mean_dpnb_vs_raw_throughput": ar["raw_mean_s"] / ar["dpnb_mean_s"],
               "sum_dpnb_vs_raw_checked_throughput": ar["raw_checked_sum_s"] / ar["dpnb_sum_s"],
               "sum_unchecked_vs_raw_throughput": ar["raw_sum_s"] / ar["dpnb_sum_unchecked_s"],
               "step_hosts_vs_one_host": median["step_hosts"]["step_s"]
               / median["step_one_host"]["step_s"],
               "step_hosts_vs_one_host_paired": statistics.median(
                   a["step_s"] / b["step_s"]
                   for a, b in zip(runs["step_hosts"], runs["step_one_host"]))}
    print(f"\n# 2 test hosts x 1 rank over veth (TCP), {started}, load average "
          f"{load_start[0]:.2f} at start, {os.getloadavg()[0]:.2f} at end; median of {args.runs} "
          "runs")
    print(f"ResNet-23 (nmaps={args.nmaps}) gradients: {tensors} tensors, "
          f"{nbytes / 2**20:.2f} MB in flat storage (dpnb's segments of {segment / 2**20:g} MB); "
          f"at least {min(link_bytes) / 2**20:.0f} MB crossed each host's link per all_reduce run")
    print(f"{'':<36} {'ms':>8} {'GB/s':>7}")
    for name, label in LABELS.items():
        seconds = ar[f"{name}_s"]
        print(f"{label:<36} {seconds * 1e3:>8.3f} {nbytes / seconds / 1e9:>7.2f}")
    print(f"dpnb / raw throughput ({args.block} calls back to back per turn; target >= 0.9): "
          f"sum {summary['sum_dpnb_vs_raw_throughput']:.2f}x, mean "
          f"{summary['mean_dpnb_vs_raw_throughput']:.2f}x; the checked sum against raw MPI's "
          f"same two calls {summary['sum_dpnb_vs_raw_checked_throughput']:.2f}x; the sum "
          f"without the agreement check {summary['sum_unchecked_vs_raw_throughput']:.2f}x")
    print(f"training step per rank (batch {args.batch_size}): across hosts "
          f"{median['step_hosts']['step_s']:.3f} s, 2 ranks on one host "
          f"{median['step_one_host']['step_s']:.3f} s: "
          f"{summary['step_hosts_vs_one_host']:.2f}x (median of the runs' own ratios "
          f"{summary['step_hosts_vs_one_host_paired']:.2f}x)")
    suffix = "".join(f"-{name}{value}" for name, value, default in
                     (("nmaps", args.nmaps, 64), ("block", args.block, 10)) if value != default)
    if output.record:
        output.record = output.record.with_name(f"hosts{suffix}.json")
    output.write({"settings": vars(args), "started": started,
                  "load_average": [load_start, os.getloadavg()],
                  "link_bytes_per_allreduce_run": link_bytes,
                  "runs": runs, "median": median, "summary": summary}, indent=1)


if __name__ == "__main__":
    main()
