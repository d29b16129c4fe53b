"""All-reduce throughput of dpnb's MPI communicator against raw mpi4py.

Run ``python benchmarks/allreduce.py`` (it starts itself on 2 ranks with
mpiexec) or ``mpiexec -n N python benchmarks/allreduce.py``.  Every dpnb
figure is printed beside its reference measured in the same run: one raw
``Allreduce(IN_PLACE)`` over one contiguous buffer of the same byte count doing
the same (for a mean, followed by the multiplication with 1/n in place, as dpnb
takes it), and NumPy's memcpy rate (``np.copyto``) for the same bytes.  Times are medians of
several repetitions, each the slowest rank's.  busbw = algbw * 2(n-1)/n.
``--record`` writes the results to benchmarks/results/allreduce.json, ``--json PATH`` to
PATH."""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from timing import Output, add_output_options, output_of

from dpnb.testing import run_ranks, time_in_turns

CHILD_FLAG = "DPNB_BENCH_ALLREDUCE_CHILD"
LAUNCH_TIMEOUT = 3600  # seconds for the whole run on all ranks
MB = 1 << 20
FORMS = {"sum": False, "mean": True}  # gradient_list's forms: all_reduce's division
GRADIENT_ROWS = {"flat_storage_s": "dpnb flat-storage grads",
                 "separate_arrays_s": "dpnb separate arrays",
                 "raw_one_buffer_s": "raw Allreduce, one buffer",
                 "raw_per_tensor_s": "raw Allreduce per tensor"}


def resnet34_shapes() -> list[tuple[int, ...]]:
    """Trainable parameter shapes of a ResNet-34 for 1000 classes, in creation order."""
    shapes = [(64, 3, 7, 7), (64,), (64,)]
    in_ch = 64
    for out_ch, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            shapes += [(out_ch, in_ch, 3, 3), (out_ch,), (out_ch,),
                       (out_ch, out_ch, 3, 3), (out_ch,), (out_ch,)]
            if b == 0 and in_ch != out_ch:
                shapes += [(out_ch, in_ch, 1, 1), (out_ch,), (out_ch,)]
            in_ch = out_ch
    return shapes + [(1000, 512), (1000,)]


class Bench:
    def __init__(self, comm):
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = comm
        self.world = MPI.COMM_WORLD
        self.n = self.world.Get_size()
        self.rank = self.world.Get_rank()

    def times(self, fns: dict, reps: int) -> dict:
        """Each function's median of the slowest rank's time, in turns shuffled anew for
        each repetition: on this machine a function run right after a reference over
        other memory is up to 10 % slower, whichever it is."""
        return time_in_turns(fns, reps, warmup=3, world=self.world, shuffle=True)

    def raw(self, nbytes: int):
        """One raw Allreduce(IN_PLACE) over one contiguous buffer of ``nbytes``."""
        buf = np.ones(nbytes // 4, np.float32)
        MPI = self.MPI
        return lambda: self.world.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)

    def memcpy(self, nbytes: int):
        """NumPy's copy of ``nbytes``: the physical reference."""
        src, dst = np.ones(nbytes // 4, np.float32), np.empty(nbytes // 4, np.float32)
        return lambda: np.copyto(dst, src)

    def gbps(self, nbytes: int, seconds: float) -> float:
        return nbytes / seconds / 1e9

    def busbw(self, algbw: float) -> float:
        return algbw * 2 * (self.n - 1) / self.n

    def out(self, text: str) -> None:
        if self.rank == 0:
            print(text, flush=True)


def reps_for(nbytes: int) -> int:
    return 30 if nbytes <= MB else 10 if nbytes <= 16 * MB else 7


def size_sweep(b: Bench) -> list[dict]:
    b.out("\n## size sweep: one float32 array (dpnb all_reduce) vs raw Allreduce vs memcpy")
    b.out(f"{'bytes':>10} {'dpnb algbw':>11} {'busbw':>8} {'raw algbw':>10} {'busbw':>8} "
          f"{'memcpy':>8} {'dpnb/raw':>9} {'dpnb/memcpy':>12}   (GB/s)")
    rows = []
    for nbytes in [4 << 10 << (2 * i) for i in range(9)]:  # 4 KB .. 256 MB
        reps = reps_for(nbytes)
        array = np.ones(nbytes // 4, np.float32)
        t = b.times({"dpnb": lambda: b.comm.all_reduce(array), "raw": b.raw(nbytes),
                     "memcpy": b.memcpy(nbytes)}, reps)
        dpnb_t, raw_t, copy_t = t["dpnb"], t["raw"], t["memcpy"]
        row = {"bytes": nbytes, "dpnb_s": dpnb_t, "raw_s": raw_t, "memcpy_s": copy_t,
               "dpnb_algbw": b.gbps(nbytes, dpnb_t), "raw_algbw": b.gbps(nbytes, raw_t),
               "memcpy_gbps": b.gbps(nbytes, copy_t)}
        row["dpnb_busbw"], row["raw_busbw"] = b.busbw(row["dpnb_algbw"]), b.busbw(row["raw_algbw"])
        rows.append(row)
        b.out(f"{nbytes:>10} {row['dpnb_algbw']:>11.2f} {row['dpnb_busbw']:>8.2f} "
              f"{row['raw_algbw']:>10.2f} {row['raw_busbw']:>8.2f} {row['memcpy_gbps']:>8.2f} "
              f"{raw_t / dpnb_t:>9.2f} {copy_t / dpnb_t:>12.2f}")
    return rows


def segment_sweep(b: Bench, nbytes: int = 64 * MB) -> list[dict]:
    """The measurement behind the default segment size."""
    b.out(f"\n## segment size for one {nbytes // MB} MB region (dpnb algbw, GB/s)")
    array = np.ones(nbytes // 4, np.float32)
    rows = []
    saved = b.comm.segment_bytes
    for segment in [256 << 10 << i for i in range(9)]:  # 256 KB .. 64 MB
        b.comm.segment_bytes = segment
        t = b.times({"dpnb": lambda: b.comm.all_reduce(array)}, 5)["dpnb"]
        rows.append({"segment_bytes": segment, "algbw": b.gbps(nbytes, t)})
        b.out(f"{segment:>10} {rows[-1]['algbw']:>8.2f}")
    b.comm.segment_bytes = saved
    return rows


def in_flight_together(b: Bench, nbytes: int = 16 * MB, parts: int = 8) -> dict:
    """Non-blocking Allreduces on the parts of a buffer, all in flight together or
    one after the other: why dpnb's pipeline keeps one collective in flight."""
    MPI = b.MPI
    comm = b.world.Dup()  # as dpnb's communicator: a duplicate of COMM_WORLD
    chunks = np.array_split(np.ones(nbytes // 4, np.float32), parts)

    def together():
        MPI.Request.Waitall([comm.Iallreduce(MPI.IN_PLACE, c, op=MPI.SUM) for c in chunks])

    def in_turn():
        for c in chunks:
            comm.Iallreduce(MPI.IN_PLACE, c, op=MPI.SUM).Wait()

    t = b.times({"together": together, "in_turn": in_turn}, 20)
    result = {"bytes": nbytes, "parts": parts, "together_s": t["together"],
              "in_turn_s": t["in_turn"]}
    comm.Free()
    b.out(f"\n## {parts} Iallreduce of {nbytes // MB // parts} MB: all in flight "
          f"{b.gbps(nbytes, result['together_s']):.2f} GB/s, one after the other "
          f"{b.gbps(nbytes, result['in_turn_s']):.2f} GB/s")
    return result


def gradient_list(b: Bench, shapes: list, label: str) -> dict:
    """Flat-storage gradients and the same list as separate arrays, summed and averaged,
    against raw Allreduce doing the same: one per tensor, and one over a buffer of all
    the bytes; for the mean each is followed by its multiplication with 1/n in place
    (how dpnb takes the mean)."""
    import dpnb as nn

    nn.clear_parameters()
    with nn.parameter_scope(label):
        params = [nn.get_parameter_or_create(f"p{i}", s) for i, s in enumerate(shapes)]
    for p in params:
        p.g = np.ones(p.shape, np.float32)
    grads = [p.grad for p in params]
    arrays = [np.ones(s, np.float32) for s in shapes]
    nbytes = sum(a.nbytes for a in arrays)
    buffer = np.ones(nbytes // 4, np.float32)
    MPI, scale = b.MPI, np.float32(1 / b.n)

    def raw(targets: list, mean: bool):
        def run():
            for a in targets:
                b.world.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
                if mean:
                    np.multiply(a, scale, out=a)
        return run

    fns = {"memcpy": b.memcpy(nbytes)}
    for form, mean in FORMS.items():
        fns.update({(form, "flat_storage_s"): lambda d=mean: b.comm.all_reduce(grads, division=d),
                    (form, "separate_arrays_s"): lambda d=mean: b.comm.all_reduce(arrays,
                                                                                  division=d),
                    (form, "raw_per_tensor_s"): raw(arrays, mean),
                    (form, "raw_one_buffer_s"): raw([buffer], mean)})
    t = b.times(fns, reps_for(nbytes))
    result = {"tensors": len(shapes), "bytes": nbytes, "memcpy_s": t["memcpy"]}
    for form in FORMS:
        result[form] = {row: t[(form, row)] for row in GRADIENT_ROWS}
    b.out(f"\n## {label}: {len(shapes)} tensors, {nbytes / MB:.1f} MB")
    b.out(f"{'':<36} {'time ms':>9} {'algbw':>7} {'busbw':>7} {'vs raw':>7} {'vs memcpy':>9}"
          "   (vs raw: the raw Allreduce of one buffer doing the same)")
    for form, mean in FORMS.items():
        b.out(f"{form} (division={mean})")
        times = result[form]
        for row, name in GRADIENT_ROWS.items():
            algbw = b.gbps(nbytes, times[row])
            b.out(f"  {name + (' + x 1/n' if mean and row.startswith('raw') else ''):<34} "
                  f"{times[row] * 1e3:>9.3f} {algbw:>7.2f} {b.busbw(algbw):>7.2f} "
                  f"{times['raw_one_buffer_s'] / times[row]:>7.2f} "
                  f"{result['memcpy_s'] / times[row]:>9.2f}")
    b.out(f"{'memcpy (np.copyto)':<36} {result['memcpy_s'] * 1e3:>9.3f}")
    nn.clear_parameters()
    return result


def agreement_overhead(b: Bench, nbytes: int = MB, reps: int = 300) -> dict:
    """all_reduce of one 1 MB array with the agreement check on and off, interleaved."""
    array = np.ones(nbytes // 4, np.float32)

    def with_check(flag: bool):
        def run():
            b.comm.check_agreement = flag
            b.comm.all_reduce(array)
        return run

    t = b.times({"on": with_check(True), "off": with_check(False)}, reps)
    b.comm.check_agreement = True
    result = {"bytes": nbytes, "check_on_s": t["on"], "check_off_s": t["off"]}
    result["overhead"] = result["check_on_s"] / result["check_off_s"] - 1
    b.out(f"\n## agreement check at {nbytes // 1024} KB: on {result['check_on_s'] * 1e6:.1f} us, "
          f"off {result['check_off_s'] * 1e6:.1f} us, overhead {100 * result['overhead']:.1f} %")
    return result


def reducer_gradients(b: Bench, nbytes: int = 48 * MB, parameters: int = 24) -> dict:
    """Flat-storage gradients averaged by the gradient reducer and by nnabla's
    ``all_reduce(list, division=True)``, against raw ``Allreduce`` calls over the
    same bytes in segments of the communicator's size, without division (the
    fastest plain MPI form here)."""
    import dpnb as nn
    import dpnb.solvers as S

    nn.clear_parameters()
    with nn.parameter_scope("reducer"):
        params = [nn.get_parameter_or_create(f"p{i}", (nbytes // 4 // parameters,))
                  for i in range(parameters)]
    for p in params:
        p.g = np.ones(p.shape, np.float32)
    solver = S.Sgd()
    solver.set_parameters(nn.get_parameters())
    reducer = b.comm.gradient_reducer(solver, division=True)
    grads = [p.grad for p in params]
    flat = np.ones(nbytes // 4, np.float32)
    step = b.comm.segment_bytes // 4
    segments = [flat[i:i + step] for i in range(0, flat.size, step)]
    MPI = b.MPI
    t = b.times({"reducer": reducer.all_reduce,
                 "list": lambda: b.comm.all_reduce(grads, division=True),
                 "raw_segments": lambda: [b.world.Allreduce(MPI.IN_PLACE, s, op=MPI.SUM)
                                          for s in segments]}, reps_for(nbytes))
    result = {"bytes": nbytes, "reducer_s": t["reducer"], "list_s": t["list"],
              "raw_segments_s": t["raw_segments"],
              "reducer_vs_raw": t["reducer"] / t["raw_segments"],
              "list_vs_raw": t["list"] / t["raw_segments"]}
    b.out(f"\n## {nbytes // MB} MB of flat gradients, division=True: reducer "
          f"{t['reducer'] * 1e3:.2f} ms ({result['reducer_vs_raw']:.2f}x raw), all_reduce(list) "
          f"{t['list'] * 1e3:.2f} ms ({result['list_vs_raw']:.2f}x raw); raw segmented "
          f"Allreduce without division {t['raw_segments'] * 1e3:.2f} ms")
    nn.clear_parameters()
    return result


def tiny_checked(b: Bench, reps: int = 2000) -> dict:
    """A one-element all_reduce with the agreement check, against raw mpi4py."""
    array = np.ones(1, np.float32)
    raw_array = np.ones(1, np.float32)
    MPI = b.MPI
    comm = b.world.Dup()
    t = b.times({"checked": lambda: b.comm.all_reduce(array),
                 "raw": lambda: comm.Allreduce(MPI.IN_PLACE, raw_array, op=MPI.SUM)}, reps)
    comm.Free()
    result = {"checked_s": t["checked"], "raw_s": t["raw"], "ratio": t["checked"] / t["raw"]}
    b.out(f"\n## one-element checked all_reduce {t['checked'] * 1e6:.1f} us, raw mpi4py "
          f"{t['raw'] * 1e6:.1f} us: {result['ratio']:.2f}x")
    return result


def staging_memory(b: Bench, calls: int = 10_000) -> dict:
    """Staging memory and process size over many calls on the packing path."""
    arrays = [np.ones(s, np.float32) for s in [(300,), (64, 64), (7, 11), (1000,)] * 4]
    b.comm.all_reduce(arrays)
    rss0, staging0 = _rss_bytes(), b.comm.staging_bytes
    for _ in range(calls):
        b.comm.all_reduce(arrays, division=True)
    result = {"calls": calls, "staging_bytes_before": staging0,
              "staging_bytes_after": b.comm.staging_bytes, "bucket_bytes": b.comm.bucket_bytes,
              "rss_growth_bytes": _rss_bytes() - rss0}
    b.out(f"\n## staging over {calls} calls: staging {staging0} -> {b.comm.staging_bytes} bytes "
          f"(bucket {b.comm.bucket_bytes}), process growth {result['rss_growth_bytes']} bytes")
    return result


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def target(value: float, at_least: float | None = None, at_most: float | None = None) -> dict:
    """One target's figure, its bound and whether the figure meets it."""
    met = value >= at_least if at_least is not None else value <= at_most
    bound = f">= {at_least:g}" if at_least is not None else f"<= {at_most:g}"
    return {"value": value, "target": bound, "met": bool(met)}


def small_targets(small: dict) -> dict:
    """The issue's targets for 1000 arrays of 1 KB, for the sum and the mean alike: flat
    storage at least 10x faster than one Allreduce per array, and within 1.5x of one
    raw Allreduce of the same megabyte (separate arrays, outside flat storage, are
    shown beside them but have no target)."""
    out = {}
    for form in FORMS:
        t = small[form]
        out[f"1000x1KB {form}: per-array raw / flat"] = target(
            t["raw_per_tensor_s"] / t["flat_storage_s"], at_least=10)
        out[f"1000x1KB {form}: flat / one-buffer raw"] = target(
            t["flat_storage_s"] / t["raw_one_buffer_s"], at_most=1.5)
    return out


def targets(results: dict) -> dict:
    resnet = results["resnet34"]
    out = {}
    for form in FORMS:
        t = resnet[form]
        out[f"ResNet-34 {form}: one-buffer raw / flat"] = target(
            t["raw_one_buffer_s"] / t["flat_storage_s"], at_least=1.5)
        out[f"ResNet-34 {form}: memcpy / flat"] = target(
            resnet["memcpy_s"] / t["flat_storage_s"], at_least=0.8)
        out[f"ResNet-34 {form}: one-buffer raw / separate"] = target(
            t["raw_one_buffer_s"] / t["separate_arrays_s"], at_least=1.0)
    out.update(small_targets(results["small_1000x1KB"]))
    out["agreement overhead"] = target(results["agreement"]["overhead"], at_most=0.05)
    out["reducer 48 MB division / raw segments"] = target(
        results["reducer_48MB"]["reducer_vs_raw"], at_most=1.2)
    out["all_reduce 48 MB division / raw segments"] = target(
        results["reducer_48MB"]["list_vs_raw"], at_most=1.2)
    out["1-element checked / raw mpi4py"] = target(results["tiny_checked"]["ratio"], at_most=3)
    staging = results["staging"]
    out["staging bounded, no growth"] = {
        "value": staging["staging_bytes_after"], "target": "no growth",
        "met": staging["staging_bytes_after"] == staging["staging_bytes_before"]
        and staging["rss_growth_bytes"] < 4 * MB}
    return out


def print_targets(b: Bench, found: dict) -> None:
    b.out("\n## targets")
    for name, t in found.items():
        b.out(f"{name:<44} {t['value']:>10.3f} {t['target']:>10}  "
              f"{'met' if t['met'] else 'NOT met'}")


def main(quick: bool, output: Output) -> None:
    import dpnb as nn
    import dpnb.communicators as C

    comm = C.MultiProcessCommunicator(nn.Context())
    comm.init()
    b = Bench(comm)
    b.out(f"# dpnb all_reduce benchmark: {b.n} ranks on {os.cpu_count()} CPUs (load average "
          f"{os.getloadavg()[0]:.2f}), segment {comm.segment_bytes} B, "
          f"bucket {comm.bucket_bytes} B")
    results = {"ranks": b.n, "segment_bytes": comm.segment_bytes, "bucket_bytes": comm.bucket_bytes,
               "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()}
    results["reducer_48MB"] = reducer_gradients(b)
    results["tiny_checked"] = tiny_checked(b)
    if quick:
        results["small_1000x1KB"] = gradient_list(b, [(256,)] * 1000, "small_1000x1KB")
        print_targets(b, small_targets(results["small_1000x1KB"]))
        return
    results["size_sweep"] = size_sweep(b)
    results["segment_sweep"] = segment_sweep(b)
    results["in_flight_together"] = in_flight_together(b)
    results["resnet34"] = gradient_list(b, resnet34_shapes(), "resnet34")
    results["small_1000x1KB"] = gradient_list(b, [(256,)] * 1000, "small_1000x1KB")
    results["agreement"] = agreement_overhead(b)
    results["staging"] = staging_memory(b)
    results["load_average_at_end"] = os.getloadavg()
    results["targets"] = targets(results)
    print_targets(b, results["targets"])
    if b.rank == 0:
        output.write(results, indent=1)


def launch(ranks: int) -> int:
    """Run this script, with this run's options, on ``ranks`` MPI processes; its exit status."""
    run = run_ranks(ranks, [sys.executable, __file__, *sys.argv[1:]], LAUNCH_TIMEOUT,
                    {CHILD_FLAG: "1"}, capture=False)
    if run.timed_out:
        print(run.ending, file=sys.stderr)
        return 1
    return run.returncode


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2, help="ranks to start (default 2)")
    parser.add_argument("--quick", action="store_true",
                        help="only the gradient-reducer figures (48 MB with division, a "
                             "one-element checked call, 1000 x 1 KB); nothing is written")
    add_output_options(parser, "allreduce")
    args = parser.parse_args()
    output = output_of(args)
    if args.quick and (output.json or output.record):
        parser.error("--quick writes nothing: --json and --record write a whole run's results")
    under_mpi = any(name in os.environ for name in (CHILD_FLAG, "PMI_RANK", "OMPI_COMM_WORLD_SIZE"))
    sys.exit(main(args.quick, output) if under_mpi else launch(args.ranks))
