"""What dpnb's fault handling buys, measured against what the same fault costs without
it, in the same run where there is such a reference.

1. Decompression bombs, each loaded in a forked child whose peak memory is read from
   ``os.wait4`` (``ru_maxrss``): a ~1.6 MB .h5 whose one gzip-chunked dataset
   (fc/affine/W) declares 1.6 GB of float32 zeros, through ``dpnb.load_parameters``;
   a ~1 MB .nnp whose parameter.h5 member inflates to 1 GiB (one 1 GiB dataset),
   through ``load_parameters`` and through ``NnpLoader``; a ~1 MB .npz whose .npy
   member is a 1 GiB array, through ``load_parameters``.  Each under the default limit
   (expected: refused with a DpnbError, tens of MB) against the same load with
   ``DPNB_MAX_DECLARED_BYTES`` set by hand to 4 GiB, which lifts the bomb guard (what
   every load did before the guard).  A child that loads nothing gives the baseline.
2. A killed driver: ``python -c "import dpnb, time; c = dpnb.start(n=2); ...;
   time.sleep(600)"`` is killed with SIGKILL once its engines run; the seconds until no
   process of its cluster (controller, schedulers, mpiexec, engines, nannies, the
   driver's watchdog) runs, and how many still run 30 s after the kill; ``--kills``
   times, median and range.  Reference: one driver started with
   ``stop_at_exit=False`` (no watchdog), watched for 30 s.
3. Sockets of a running one-host cluster of 2 engines (``dpnb.start(n=2)``): listening
   TCP and bound UDP sockets of its processes (each address once: forked schedulers
   share the controller's) on an address other than 127.0.0.1 / ::1 (expected: none).
4. An exited rank: ``mpiexec -n 2 python tests/mpi_scripts/exited.py raise`` (and
   ``exit``), ``--repeats`` times each: seconds from rank 1's exit to rank 0's error,
   median and range, against the communicator's timeout (60 s in the script) that rank
   0 would otherwise wait out.

Clusters run in a temporary IPYTHONDIR and are stopped at the end.  Prints a table;
``--record`` writes it to benchmarks/results/faults.json, ``--json PATH`` to PATH (all
four parts only).

    python benchmarks/faults.py [--kills 3] [--repeats 5] [--parts bombs,driver,sockets,exited]
                                [--json PATH] [--record]
"""
from __future__ import annotations

import argparse
import datetime
import os
import pickle
import platform
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib
from pathlib import Path

import h5py
import numpy as np
import psutil
from timing import add_output_options, output_of

import dpnb
from dpnb.cluster import processes
from dpnb.errors import DpnbError
from dpnb.formats.checked_read import LIMIT_VARIABLE
from dpnb.testing import run_script
from dpnb.utils.nnp_graph import NnpLoader

EXITED_SCRIPT = Path(__file__).resolve().parent.parent / "tests" / "mpi_scripts" / "exited.py"
MiB = 1 << 20
GiB = 1 << 30
LIFTED = 4 * GiB            # DPNB_MAX_DECLARED_BYTES set by hand: no bomb guard below it
H5_ELEMENTS = 400 * MiB     # float32: 1,677,721,600 bytes declared
INFLATED = GiB              # the .nnp's parameter.h5 and the .npz's .npy
COMMUNICATOR_TIMEOUT = 60.0  # exited.py's comm.timeout
KILL_WATCH = 30.0           # seconds after the kill at which survivors are counted
KILL_GIVE_UP = 60.0         # stop waiting (and end the survivors) after this long
PARTS = ("bombs", "driver", "sockets", "exited")


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "values": values}


# -- 1. decompression bombs --------------------------------------------------------------


def h5_bomb(path: Path, elements: int, chunk: int = MiB) -> None:
    """An .h5 parameter file of one float32 dataset fc/affine/W of ``elements`` zeros,
    gzip-chunked, every chunk the same compressed MiB of zeros: a small file."""
    packed = zlib.compress(bytes(4 * chunk), 9)
    with h5py.File(path, "w") as f:
        data = f.create_dataset("fc/affine/W", (elements,), "<f4", chunks=(chunk,),
                                compression="gzip")
        data.attrs["need_grad"] = True
        data.attrs["index"] = 0
        for start in range(0, elements, chunk):
            data.id.write_direct_chunk((start,), packed)


def _stream_into(archive: zipfile.ZipFile, member: str, head: bytes, zeros: int,
                 tail: bytes = b"") -> None:
    """Deflate ``head``, ``zeros`` zero bytes and ``tail`` into ``member``."""
    block = bytes(MiB)
    with archive.open(member, "w", force_zip64=True) as out:
        out.write(head)
        for start in range(0, zeros, MiB):
            out.write(block[:min(MiB, zeros - start)])
        out.write(tail)


def nnp_bomb(path: Path, nbytes: int) -> None:
    """An .nnp whose parameter.h5 is a real .h5 of one contiguous float32 dataset
    fc/affine/W of ``nbytes`` zeros: its header, then the zeros, deflated."""
    with tempfile.TemporaryDirectory() as tmp:
        h5 = Path(tmp) / "parameter.h5"
        with h5py.File(h5, "w") as f:
            group = f.require_group("fc/affine")
            plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            plist.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)   # storage placed now ...
            plist.set_fill_time(h5py.h5d.FILL_TIME_NEVER)     # ... and never written
            space = h5py.h5s.create_simple((nbytes // 4,))
            h5py.h5d.create(group.id, b"W", h5py.h5t.IEEE_F32LE, space, dcpl=plist)
            group["W"].attrs["need_grad"] = True
            group["W"].attrs["index"] = 0
            offset = group["W"].id.get_offset()
        with open(h5, "rb") as f:
            head = f.read(offset)
            f.seek(offset + nbytes)
            tail = f.read()
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("nnp_version.txt", "0.1\n")
            _stream_into(archive, "parameter.h5", head, nbytes, tail)


def npz_bomb(path: Path, nbytes: int) -> None:
    """A dpnb .npz whose w.npy declares (and holds) ``nbytes`` of float32 zeros."""
    import io

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (nbytes // 4,)})
    names = io.BytesIO()
    np.save(names, np.array(["w"]))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        _stream_into(archive, "w.npy", header.getvalue(), nbytes)
        archive.writestr("__need_grad__.npy", names.getvalue())


def in_child(work, limit: int | None):
    """Run ``work()`` in a forked child, ``DPNB_MAX_DECLARED_BYTES`` unset (``limit``
    None) or set to ``limit``: (outcome dict, the child's peak RSS in bytes)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.close(read)
            os.environ.pop(LIMIT_VARIABLE, None)
            if limit is not None:
                os.environ[LIMIT_VARIABLE] = str(limit)
            start = time.perf_counter()
            try:
                outcome = {"outcome": "loaded", "loaded_bytes": work()}
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                outcome = {"outcome": "refused" if isinstance(e, DpnbError) else "raised",
                           "error": type(e).__name__, "message": str(e)}
            outcome["seconds"] = time.perf_counter() - start
            with os.fdopen(write, "wb") as f:
                pickle.dump(outcome, f)
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    _, status, usage = os.wait4(pid, 0)
    if not data:
        return {"outcome": "died", "status": status}, usage.ru_maxrss * 1024
    return pickle.loads(data), usage.ru_maxrss * 1024


def _parameter_bytes(params: dict) -> int:
    """The bytes of the arrays in a (nested) parameter dict."""
    return int(sum(_parameter_bytes(v) if isinstance(v, dict) else np.asarray(v.d).nbytes
                   for v in params.values()))


def load_with_load_parameters(path: Path):
    def load() -> int:
        dpnb.load_parameters(path)
        return _parameter_bytes(dpnb.get_parameters(grad_only=False))
    return load


def load_with_nnp_loader(path: Path):
    def load() -> int:
        scope: dict = {}
        NnpLoader(path, scope=scope)
        return _parameter_bytes(scope)
    return load


def measure_bombs(tmp: Path, h5_elements: int = H5_ELEMENTS, inflated: int = INFLATED,
                  lifted: int = LIFTED) -> dict:
    files = {".h5": tmp / "bomb.h5", ".nnp": tmp / "bomb.nnp", ".npz": tmp / "bomb.npz"}
    h5_bomb(files[".h5"], h5_elements)
    nnp_bomb(files[".nnp"], inflated)
    npz_bomb(files[".npz"], inflated)
    cases = [(".h5", h5_elements * 4, "load_parameters", load_with_load_parameters),
             (".nnp", inflated, "load_parameters", load_with_load_parameters),
             (".nnp", inflated, "NnpLoader", load_with_nnp_loader),
             (".npz", inflated, "load_parameters", load_with_load_parameters)]
    _, baseline = in_child(lambda: 0, None)
    rows = []
    for ext, declared, loader, make in cases:
        load = make(files[ext])
        guarded, guarded_peak = in_child(load, None)
        lifted_outcome, lifted_peak = in_child(load, lifted)
        size = files[ext].stat().st_size
        name = f"{ext} bomb, {size / 1e6:.1f} MB -> {declared / 1e9:.2f} GB, {loader}"
        rows.append({"case": name,
                     "file": ext, "loader": loader, "file_bytes": size,
                     "declared_bytes": declared,
                     "default": {**guarded, "peak_rss": guarded_peak},
                     "limit_set_by_hand": {**lifted_outcome, "peak_rss": lifted_peak}})
    _, baseline_after = in_child(lambda: 0, None)
    return {"baseline_rss": baseline, "baseline_rss_after": baseline_after,
            "limit_set_by_hand": lifted, "cases": rows}


# -- 2. a killed driver ------------------------------------------------------------------

DRIVER = ("import dpnb, time; c = dpnb.start(n=2{options}); "
          "print('READY', c.ipp.profile_dir, c.ipp.cluster_id, flush=True); time.sleep(600)")


def role(p) -> str:
    """The process's role in its cluster, the driver's watchdog named as such."""
    try:
        if any("dpnb.cluster.watchdog" in part for part in p.cmdline()):
            return "watchdog"
    except psutil.Error:
        pass
    return processes.role_of(p)


def _descendants(pid: int) -> list:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _read_ready(driver: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """The profile folder and cluster id the driver prints once its engines run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([driver.stdout], [], [], 1.0)
        if ready:
            line = driver.stdout.readline()
            if not line:
                break
            if line.startswith("READY "):
                _, profile_dir, cluster_id = line.split()
                return profile_dir, cluster_id
    raise RuntimeError(f"the driver did not start its cluster within {timeout:g} s "
                       f"(exit status {driver.poll()})")


def cluster_processes(profile_dir: str, cluster_id: str, roots: list[int]) -> list:
    """Every live process of the cluster (its record, ipyparallel's tags, descendants)
    and of the processes ``roots`` descend to (the driver's watchdog)."""
    found = {p.pid: p for p in processes.find(profile_dir, cluster_id).processes}
    for root in roots:
        for p in _descendants(root):
            found.setdefault(p.pid, p)
    return list(found.values())


def end_all(procs: list) -> None:
    """SIGKILL whatever of ``procs`` (all started by this script) still runs."""
    for p in procs:
        if processes.alive(p):
            try:
                p.kill()
            except psutil.Error:
                pass
    psutil.wait_procs(procs, timeout=10)


def kill_driver_once(watchdog: bool = True) -> dict:
    """Start a driver and its cluster, SIGKILL the driver, and watch the cluster's
    processes end; without ``watchdog`` (``stop_at_exit=False``), only until 30 s."""
    options = "" if watchdog else ", stop_at_exit=False"
    give_up = KILL_GIVE_UP if watchdog else KILL_WATCH
    driver = subprocess.Popen([sys.executable, "-c", DRIVER.format(options=options)],
                              stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    procs: list = []
    try:
        profile_dir, cluster_id = _read_ready(driver, timeout=180)
        procs = cluster_processes(profile_dir, cluster_id, [driver.pid])
        roles: dict[str, int] = {}
        for p in procs:
            roles[role(p)] = roles.get(role(p), 0) + 1
        driver.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        driver.wait()
        gone_after = None
        at_watch = None
        while True:
            now = time.monotonic() - killed
            living = [p for p in procs if processes.alive(p)]
            if at_watch is None and now >= KILL_WATCH:
                at_watch = len(living)
            if not living:
                gone_after = now
                break
            if now >= give_up:
                break
            time.sleep(0.05)
        left = [p.pid for p in procs if processes.alive(p)]
        return {"processes": len(procs), "roles": roles, "seconds_until_all_gone": gone_after,
                "running_at_30s": at_watch if at_watch is not None else 0,
                "running_at_give_up": len(left)}
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        end_all(procs)


def measure_driver(kills: int) -> dict:
    runs = [kill_driver_once() for _ in range(kills)]
    reference = kill_driver_once(watchdog=False)
    gone = [r["seconds_until_all_gone"] for r in runs if r["seconds_until_all_gone"] is not None]
    return {"kills": kills, "runs": runs, "without_watchdog": reference,
            "seconds_until_all_gone": spread(gone) if gone else None,
            "never_all_gone": kills - len(gone),
            "max_running_at_30s": max(r["running_at_30s"] for r in runs)}


# -- 3. sockets --------------------------------------------------------------------------

LOOPBACK = ("127.0.0.1", "::1")


def measure_sockets() -> dict:
    cluster = dpnb.start(n=2)
    procs: list = []
    try:
        procs = cluster_processes(cluster.ipp.profile_dir, cluster.ipp.cluster_id,
                                  [*cluster.pids, os.getpid()])
        sockets = []
        for p in procs:
            try:
                sockets += [(p.pid, role(p), "tcp", c.laddr.ip, c.laddr.port)
                            for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
                sockets += [(p.pid, role(p), "udp", c.laddr.ip, c.laddr.port)
                            for c in p.net_connections("udp") if not c.raddr]
            except psutil.Error:
                continue
        # forked schedulers hold the controller's sockets too: count each address once
        distinct = {s[2:] for s in sockets}
        beyond = [s for s in sockets if s[3] not in LOOPBACK]
        roles = sorted({role(p) for p in procs})
    finally:
        cluster.stop()
        end_all(procs)
    return {"processes": len(procs), "roles": roles, "sockets": len(distinct),
            "beyond_loopback": len(beyond), "beyond": [list(s) for s in beyond],
            "listening": [list(s) for s in sockets]}


# -- 4. an exited rank -------------------------------------------------------------------


def measure_exited(repeats: int) -> dict:
    results = {}
    for mode in ("raise", "exit"):
        delays, failures = [], []
        for _ in range(repeats):
            run = run_script(2, EXITED_SCRIPT, mode, timeout=COMMUNICATOR_TIMEOUT + 30)
            exited = re.search(r"^RANK 1 EXITS AT (\S+)$", run.output, re.M)
            learned = re.search(r"^RANK 0 LEARNED AT (\S+)$", run.output, re.M)
            if run.timed_out or not (exited and learned) or run.failures():
                failures.append(run.explain() + "\n" + run.output[-2000:])
                continue
            delays.append(float(learned.group(1)) - float(exited.group(1)))
        results[mode] = {"seconds": spread(delays) if delays else None, "failures": failures}
    return {"repeats": repeats, "timeout": COMMUNICATOR_TIMEOUT, "modes": results}


# -- the table ---------------------------------------------------------------------------


def mib(nbytes: float) -> str:
    return f"{nbytes / MiB:,.0f} MiB"


def describe(outcome: dict, baseline: int) -> str:
    what = {"loaded": "loaded", "refused": "refused", "raised": outcome.get("error", "raised"),
            "died": "died"}[outcome["outcome"]]
    return f"{what}, {mib(outcome['peak_rss'])} (+{mib(outcome['peak_rss'] - baseline)})"


def table(result: dict) -> list[tuple[str, str, str, str, str]]:
    """Rows of (measure, dpnb, reference, ratio, what the reference is)."""
    rows = []
    bombs = result.get("bombs")
    if bombs:
        base = bombs["baseline_rss"]
        rows.append(("forked child, import dpnb only: peak RSS", mib(base), "", "", ""))
        lifted = f"{LIMIT_VARIABLE}={bombs['limit_set_by_hand'] / GiB:g} GiB"
        for case in bombs["cases"]:
            ours, ref = case["default"], case["limit_set_by_hand"]
            extra = (ours["peak_rss"] - base) / max(ref["peak_rss"] - base, 1)
            rows.append((case["case"], describe(ours, base), describe(ref, base),
                         f"{extra:.3f}", lifted))
    exited = result.get("exited")
    if exited:
        for mode, found in exited["modes"].items():
            s = found["seconds"]
            figure = f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})" if s else "no result"
            if found["failures"]:
                figure += f", {len(found['failures'])} failed"
            rows.append((f"exited rank ({mode}): s until rank 0 raises, median (range) of "
                         f"{exited['repeats']}", figure, f"{exited['timeout']:.0f}",
                         f"{s['median'] / exited['timeout']:.4f}" if s else "",
                         "the communicator's timeout"))
    sockets = result.get("sockets")
    if sockets:
        rows.append((f"2-engine cluster ({sockets['processes']} processes): listening "
                     "sockets beyond loopback",
                     f"{sockets['beyond_loopback']} of {sockets['sockets']}", "", "", ""))
    driver = result.get("driver")
    if driver:
        s = driver["seconds_until_all_gone"]
        figure = (f"{s['median']:.1f} ({s['min']:.1f}-{s['max']:.1f})" if s else "never")
        if driver["never_all_gone"]:
            figure += f", {driver['never_all_gone']} never"
        count = max(r["processes"] for r in driver["runs"])
        ref = driver["without_watchdog"]
        ref_gone = ref["seconds_until_all_gone"]
        what = "stop_at_exit=False (no watchdog)"
        rows.append((f"killed driver: s until its {count} processes end, median (range) "
                     f"of {driver['kills']}", figure,
                     f"{ref_gone:.1f}" if ref_gone is not None else f"> {KILL_WATCH:.0f}", "",
                     what))
        rows.append((f"killed driver: its processes running {KILL_WATCH:.0f} s after, most",
                     str(driver["max_running_at_30s"]),
                     f"{ref['running_at_30s']} of {ref['processes']}", "", what))
    return rows


def print_table(rows) -> None:
    width = max(len(r[0]) for r in rows)
    ours = max(len(r[1]) for r in rows)
    refs = max(len(r[2]) for r in rows + [("", "", "reference")])
    print(f"{'measure':<{width}}  {'dpnb':>{ours}}  {'reference':>{refs}}  {'ratio':>7}  "
          "reference is")
    for name, figure, ref, ratio, what in rows:
        print(f"{name:<{width}}  {figure:>{ours}}  {ref:>{refs}}  {ratio:>7}  {what}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=3, help="drivers killed")
    parser.add_argument("--repeats", type=int, default=5, help="exited-rank runs of each mode")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help="comma-separated parts to run (the JSON is written for all only)")
    add_output_options(parser, "faults")
    args = parser.parse_args()
    output = output_of(args)
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; choose from {PARTS}")
    if set(parts) != set(PARTS) and (output.json or output.record):
        parser.error("--json and --record write the results of all parts only")
    started = datetime.datetime.now().astimezone()
    clock = time.monotonic()
    ipython_dir = tempfile.mkdtemp(prefix="dpnb-faults-ipython-")
    os.environ["IPYTHONDIR"] = ipython_dir
    result: dict = {}
    try:
        if "bombs" in parts:      # first: forks before any cluster's threads exist
            with tempfile.TemporaryDirectory(prefix="dpnb-faults-") as tmp:
                result["bombs"] = measure_bombs(Path(tmp))
        if "exited" in parts:
            result["exited"] = measure_exited(args.repeats)
        if "sockets" in parts:
            result["sockets"] = measure_sockets()
        if "driver" in parts:
            result["driver"] = measure_driver(args.kills)
    finally:
        shutil.rmtree(ipython_dir, ignore_errors=True)
    seconds = time.monotonic() - clock
    print(f"dpnb's fault handling, {started:%Y-%m-%d %H:%M %Z}, {seconds:.0f} s; bombs: "
          "outcome, peak RSS of a forked child (+ over one that loads nothing), ratio of "
          "the extra memory")
    print_table(table(result))
    output.write({
        "benchmark": "faults", "date": started.isoformat(timespec="seconds"),
        "seconds": seconds, "kills": args.kills, "repeats": args.repeats,
        "table": [dict(zip(("measure", "dpnb", "reference", "ratio", "reference_is"), r))
                  for r in table(result)],
        **result,
        "environment": {"python": platform.python_version(), "numpy": np.__version__,
                        "h5py": h5py.__version__, "platform": platform.platform(),
                        "machine": platform.machine(), "cpus": os.cpu_count(),
                        "memory": psutil.virtual_memory().total,
                        "executable": sys.executable}}, indent=2)


if __name__ == "__main__":
    main()
