"""``dpnb.where()`` and ``%dpnb where`` on a real 2-engine cluster: idle engines, a pure
Python loop, a NumPy loop and a collective one rank never joins, all answered within
2 s while the cell runs; a stopped and a killed engine reported as not answering.
How the stacks are taken is checked in this process and in one that signals itself."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

import dpnb
from dpnb.cluster import Cluster
from dpnb.cluster.engine.stack_dumps import (COLLECTIVE, DPNB, LIBRARY, MAX_FRAMES, PLUMBING, USER,
                                     classify, thread_stacks)
from dpnb.errors import DpnbError
from dpnb.notebook.stacks import Frame, RankStack, Stacks, ThreadStack

TIMEOUT = 60
ANSWER_WITHIN = 2.0

BUSY_PYTHON = """
import time
def spin_in_python(seconds):
    end = time.monotonic() + seconds
    count = 0
    while time.monotonic() < end:
        count += 1
    return count
print(STARTED, flush=True)
counted = spin_in_python({seconds})
"""

BUSY_NUMPY = """
import time
import numpy as np
def multiply_matrices(seconds):
    a = np.random.default_rng(rank).random((300, 300))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        a = a @ a
        a /= np.abs(a).max()
print(STARTED, flush=True)
multiply_matrices({seconds})
"""

# Rank 0 waits in all_reduce while rank 1 naps, then joins it, so the collective ends.
COLLECTIVE_WAIT = """
import time
import numpy as np
import dpnb
import dpnb.communicators as C
from dpnb.ext_utils import get_extension_context
comm = C.MultiProcessCommunicator(get_extension_context("cpu"))
comm.init()
comm.timeout = 60
def nap(seconds):
    time.sleep(seconds)
if rank == 1:
    print(STARTED, flush=True)
    nap({seconds})
x = dpnb.NdArray.from_numpy_array(np.full(4, rank + 1.0))
print(STARTED, flush=True)
comm.all_reduce(x)
"""


STARTED = "entering the call"


def submit(view, code: str, seconds: float):
    """Run ``code`` on every engine without waiting, as ``%%px --noblock`` does, and
    return once every engine printed that it enters the call (plus a moment to enter)."""
    running = view.execute(f"STARTED = {STARTED!r}\n" + textwrap.dedent(code.format(
        seconds=seconds)), block=False)
    deadline = time.monotonic() + TIMEOUT
    while not all(STARTED in md["stdout"] for md in running.metadata):
        assert time.monotonic() < deadline and not running.ready(), running.metadata
        time.sleep(0.02)
    time.sleep(0.2)
    return running


def timed_where(view, timeout: float = ANSWER_WITHIN) -> tuple[Stacks, float]:
    start = time.monotonic()
    stacks = dpnb.where(view, timeout=timeout)
    return stacks, time.monotonic() - start


@pytest.fixture(scope="module")
def cluster(ipython_dir):
    """One 2-engine cluster for the module, with a private IPYTHONDIR."""
    c = Cluster(2, timeout=TIMEOUT, progress=False)
    c.start()
    yield c
    c.stop()


def wait_for(result, timeout: float = TIMEOUT) -> None:
    result.get(timeout=timeout)


def test_idle_engines(cluster):
    stacks, elapsed = timed_where(cluster.view)
    assert elapsed < ANSWER_WITHIN and stacks.missing == []
    pids = [row[3] for row in cluster.topology().rows]
    for rank in (0, 1):
        r = stacks[rank]
        assert r.answered and r.state == "idle" and r.pid == pids[rank]
        assert r.main is not None and r.innermost == [] and r.collective is None
        names = {t.name for t in r.threads}
        assert {"MainThread", "dpnb-stacks"} <= names
    text = stacks.stacks[0]
    assert "Thread MainThread (main)" in text and "ipyparallel/engine/app.py" in text
    assert "2 of 2 ranks answered" in repr(stacks) and "<table>" in stacks._repr_html_()
    again, _ = timed_where(cluster.view)                        # a second ask gets a new dump
    assert again.missing == [] and again[0].pid == stacks[0].pid


def test_pure_python_loop(cluster):
    running = submit(cluster.view, BUSY_PYTHON, seconds=4)
    stacks, elapsed = timed_where(cluster.view)
    assert elapsed < ANSWER_WITHIN, stacks
    for rank in (0, 1):
        r = stacks[rank]
        assert r.answered and r.state == "busy", stacks
        assert r.innermost[0].function == "spin_in_python" and r.innermost[0].kind == USER
        assert r.innermost[1].function == "<module>" and r.innermost[0].place.startswith("cell:")
    assert "spin_in_python" in repr(stacks)
    assert not running.ready()                                  # the cell ran on, undisturbed
    wait_for(running)                                           # no error from the signal
    assert all(n > 0 for n in cluster.view.pull("counted"))


ASK_FROM_ANOTHER_PROCESS = """
import json, sys, time
import ipyparallel as ipp
import dpnb
client = ipp.Client(profile_dir=sys.argv[1], cluster_id=sys.argv[2])
start = time.monotonic()
stacks = dpnb.where(client[:])
elapsed = time.monotonic() - start
print(json.dumps({"elapsed": elapsed, "states": [stacks[r].state for r in (0, 1)],
                  "functions": [stacks[r].innermost[0].function for r in (0, 1)]}))
client.close()
"""


def test_another_process_asks_while_this_one_s_cell_runs(cluster):
    """A terminal, or a second notebook, attached to engines busy with this notebook's cell."""
    running = submit(cluster.view, BUSY_PYTHON, seconds=15)
    try:
        out = subprocess.run([sys.executable, "-c", ASK_FROM_ANOTHER_PROCESS,
                              cluster.ipp.profile_dir, cluster.ipp.cluster_id],
                             capture_output=True, text=True, timeout=TIMEOUT, check=False)
        assert out.returncode == 0, out.stderr
        answer = json.loads(out.stdout.strip().splitlines()[-1])
        assert answer["elapsed"] < ANSWER_WITHIN
        assert answer["functions"] == ["spin_in_python"] * 2 and answer["states"] == ["busy"] * 2
        assert not running.ready()
    finally:
        cluster.client.send_signal("SIGINT", block=True)          # end the cell early
        with pytest.raises(Exception, match="KeyboardInterrupt"):
            running.get(timeout=TIMEOUT)


def test_numpy_loop(cluster):
    running = submit(cluster.view, BUSY_NUMPY, seconds=4)
    stacks, elapsed = timed_where(cluster.view)
    assert elapsed < ANSWER_WITHIN, stacks
    assert [stacks[r].innermost[0].function for r in (0, 1)] == ["multiply_matrices"] * 2, stacks
    wait_for(running)


def test_rank_waiting_in_a_collective_the_other_does_not_join(cluster):
    running = submit(cluster.view, COLLECTIVE_WAIT, seconds=6)
    stacks, elapsed = timed_where(cluster.view)
    assert elapsed < ANSWER_WITHIN, stacks
    waiting, napping = stacks[0], stacks[1]
    assert waiting.collective is not None and waiting.collective.function == "all_reduce", stacks
    assert waiting.innermost[0].function == "<module>"          # the cell that called it
    assert napping.collective is None and napping.innermost[0].function == "nap", stacks
    assert "all_reduce (communicator.py:" in repr(stacks)
    assert any(f.kind == COLLECTIVE for f in waiting.main.frames)
    wait_for(running)                                           # rank 1 joined: both done


def test_dpnb_where_magic_through_ipython(cluster):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "dpnb")
    running = submit(cluster.view, BUSY_PYTHON, seconds=3)
    start = time.monotonic()
    stacks = shell.run_line_magic("dpnb", "where --timeout 1.5")
    assert time.monotonic() - start < 1.5
    assert isinstance(stacks, Stacks) and stacks.missing == []
    assert [stacks[r].innermost[0].function for r in (0, 1)] == ["spin_in_python"] * 2
    wait_for(running)
    for bad in (0, -1.0, float("nan"), float("inf"), "2", True):
        with pytest.raises(DpnbError, match="finite timeout above 0"):
            dpnb.where(cluster.view, timeout=bad)


def test_where_from_another_thread_while_a_blocking_px_cell_runs(cluster):
    """What a console on a kernel subshell does while the notebook waits in ``%%px``."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    cluster.view.activate()
    asked = []
    threading.Timer(0.8, lambda: asked.append(timed_where(cluster.view))).start()
    result = shell.run_cell(f"%%px\nSTARTED = {STARTED!r}\n" + BUSY_PYTHON.format(seconds=3))
    assert result.success and len(asked) == 1
    stacks, elapsed = asked[0]
    assert elapsed < ANSWER_WITHIN, stacks
    assert [stacks[r].innermost[0].function for r in (0, 1)] == ["spin_in_python"] * 2


def test_stopped_engine_does_not_answer(cluster):
    victim = cluster.topology().rows[1][3]
    os.kill(victim, signal.SIGSTOP)
    try:
        stacks, elapsed = timed_where(cluster.view, timeout=1.0)
    finally:
        os.kill(victim, signal.SIGCONT)
    assert 1.0 <= elapsed < 2.0
    assert stacks.missing == [1] and stacks[0].answered
    assert "no answer in 1 s" in stacks[1].state and stacks[1].threads == []
    assert "rank 1: " in stacks.stacks[1] and "1 of 2 ranks answered" in repr(stacks)
    assert "long C call that holds the GIL" in stacks.stacks[1]
    assert dpnb.where(cluster.view).missing == []               # back once it runs again


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_killed_engine_is_reported_not_raised(cluster):
    victim = psutil.Process(cluster.topology().rows[1][3])
    victim.kill()                                               # under MPI, the other rank ends too
    psutil.wait_procs([victim], timeout=10)
    stacks, elapsed = timed_where(cluster.view)
    assert elapsed < ANSWER_WITHIN + 1.0
    assert 1 in stacks.missing and not stacks[1].answered
    assert ("gone" in stacks[1].state or "no answer" in stacks[1].state
            or "not signalled" in stacks[1].state), stacks
    assert "rank 1: " in stacks.stacks[1]


# -- the stacks of this process, without a cluster ------------------------------------

PREFIXES = ("/nowhere/communicators/", "/nowhere/", (), ())


def recurse(depth: int, stop: threading.Event) -> None:
    if depth:
        recurse(depth - 1, stop)
    else:
        stop.wait()


def test_thread_stacks_of_this_process():
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait, name="helper")
    deep = threading.Thread(target=recurse, args=(150, stop), name="deep")
    helper.start()
    deep.start()
    try:
        time.sleep(0.2)
        threads = {t["name"]: t for t in thread_stacks(PREFIXES)}
    finally:
        stop.set()
        helper.join()
        deep.join()
    main = threads["MainThread"]
    assert main["main"] and not threads["helper"]["main"] and not main["cut"]
    assert main["frames"][0][2] == "thread_stacks"  # the one taking them
    file, line, function, kind = main["frames"][1]
    assert (file, function, kind) == (__file__, "test_thread_stacks_of_this_process", USER)
    assert isinstance(line, int)
    assert any(f[2] == "wait" for f in threads["helper"]["frames"])
    assert threads["deep"]["cut"] and len(threads["deep"]["frames"]) == MAX_FRAMES
    assert threads["deep"]["frames"][0][2] == "wait"  # innermost first


# A process that installs a dumper (publishing into a list), then spins in Python while
# it signals itself from another thread: the dump comes while the loop runs.
SIGNALLED_WHILE_BUSY = """
import os, signal, threading, time
from dpnb.cluster.engine import stack_dumps
dumps = []
dumper = stack_dumps.StackDumper(getattr(signal, stack_dumps.SIGNAL), dumps.append)
def spin_in_python():
    end = time.monotonic() + 20
    while not dumps and time.monotonic() < end:
        pass
threading.Timer(0.3, os.kill, (os.getpid(), dumper.signum)).start()
spin_in_python()
main = next(t for t in dumps[0] if t["main"])
print(main["frames"][0][2], len(dumps))
"""


def test_a_signal_gets_the_stacks_while_python_runs():
    out = subprocess.run([sys.executable, "-c", SIGNALLED_WHILE_BUSY], capture_output=True,
                         text=True, timeout=TIMEOUT, check=True)
    assert out.stdout.split() == ["spin_in_python", "1"], out


def test_classify_frames():
    prefixes = ("/x/dpnb/communicators/", "/x/dpnb/", ("/site/ipykernel/", "/lib/threading.py"),
                ("/site/", "/lib/"))
    assert classify("/x/dpnb/communicators/communicator.py", prefixes) == COLLECTIVE
    assert classify("/x/dpnb/functions/math.py", prefixes) == DPNB
    assert classify("/site/ipykernel/kernelbase.py", prefixes) == PLUMBING
    assert classify("/lib/threading.py", prefixes) == PLUMBING
    assert classify("<frozen runpy>", prefixes) == PLUMBING
    assert classify("/tmp/ipykernel_12/345.py", prefixes) == USER
    assert classify("/site/numpy/_core/_methods.py", prefixes) == LIBRARY
    assert classify("/lib/json/decoder.py", prefixes) == LIBRARY


def test_summary_of_one_rank():
    frames = [Frame("/x/dpnb/communicators/_internal/wait.py", 9, "wait_until", COLLECTIVE),
              Frame("/x/dpnb/communicators/communicator.py", 270, "all_reduce", COLLECTIVE),
              Frame("/tmp/ipykernel_1/22.py", 3, "step", USER),
              Frame("/tmp/ipykernel_1/22.py", 5, "<module>", USER),
              Frame("/site/ipykernel/kernelbase.py", 1, "dispatch_shell", PLUMBING)]
    rank = RankStack(0, "busy", True, "h", 7, [ThreadStack(1, "MainThread", True, frames),
                                               ThreadStack(2, "IOPub", False, [], cut=True)])
    assert [str(f) for f in rank.innermost] == ["cell:3 step", "cell:5 <module>"]
    assert rank.collective.function == "all_reduce"
    gone = RankStack(1, "gone: not registered with the controller", False)
    stacks = Stacks({0: rank, 1: gone}, elapsed=0.1)
    assert stacks.missing == [1]
    row0, row1 = stacks.table().rows
    assert row0[4] == "cell:3 step < cell:5 <module>" and row0[5] == "all_reduce (communicator.py:270)"
    assert row1[1:4] == ["?", "?", "gone: not registered with the controller"]
    text = stacks.stacks[0]
    assert text.index("MainThread") < text.index("IOPub") and "(no Python frame)" in text
    assert "... (more frames)" in text


def test_controller_without_task_database_is_a_clear_error(cluster):
    with (Cluster(1, timeout=TIMEOUT, progress=False, controller_args=["--nodb"]) as bare,
          pytest.raises(DpnbError, match="task database.*--nodb")):
        dpnb.where(bare.view)
