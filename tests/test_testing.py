"""dpnb.testing itself: the per-rank checks and their report, runs on real MPI ranks
(tests/mpi_scripts/harness.py) that fail a check, raise or hang, and the timing of
functions in turns, on one process and as the slowest of two ranks."""
from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import psutil
import pytest

from dpnb.errors import DpnbError
from dpnb.testing import (Checks, RanksRun, assert_ranks_ok, median_seconds, mpi_command,
                          rank_data, run_ranks, run_script, time_in_turns, timings)

SCRIPT = Path(__file__).parent / "mpi_scripts" / "harness.py"


# -- checks on one rank -------------------------------------------------------------

def test_checks_record_each_check_and_print_failures_at_once(capsys):
    ok = Checks(3)
    assert ok.true(1 + 1 == 2, "sum") and not ok.true(False, "answer", "got 41")
    assert ok.items == [{"check": "sum", "ok": True, "detail": ""},
                        {"check": "answer", "ok": False, "detail": "got 41"}]
    assert ok.failed == [ok.items[1]]
    assert capsys.readouterr().out == "RANK 3 FAIL: answer: got 41\n"


@pytest.mark.parametrize("dtype, within, beyond", [
    (np.float64, 1e-13, 1e-11), (np.float32, 1e-6, 1e-4), (np.float16, 1e-3, 1e-2)])
def test_close_tolerance_defaults_by_dtype(dtype, within, beyond):
    ok = Checks(0)
    expected = np.array([1.0, -2.0, 0.0], dtype)
    assert ok.close(expected + dtype(within), expected, "within")
    assert not ok.close(expected + dtype(beyond), expected, "beyond")
    assert re.fullmatch(r"max \|got - expected\| = \S+ \(tolerance \S+\)", ok.failed[0]["detail"])


def test_close_checks_dtype_and_shape_and_integers_exactly():
    ok = Checks(0)
    assert ok.close(np.arange(3), np.arange(3), "ints")
    assert not ok.close(np.arange(3) + np.array([0, 0, 1]), np.arange(3), "ints off by one")
    assert not ok.close(np.zeros(3, np.float32), np.zeros(3), "dtype")
    assert not ok.close(np.zeros((3, 1)), np.zeros(3), "shape")
    assert ok.failed[1]["detail"] == "got float32[3], expected float64[3]"


def test_close_relative_to_the_largest_expected_and_special_values():
    ok = Checks(0)
    expected = np.array([1000.0, 1.0, np.inf, np.nan])
    got = expected + np.array([0.0, 0.5, 0.0, 0.0])  # 0.5 off: 5e-4 of the largest finite
    assert ok.close(got, expected, "relative", tol=1e-3, relative=True)
    assert not ok.close(got, expected, "relative, tighter", tol=1e-4, relative=True)
    assert ok.worst == pytest.approx(5e-4)  # the largest error measured
    assert not ok.close(got, expected, "absolute", tol=1e-3)
    assert ok.worst == pytest.approx(0.5)
    assert not ok.close(np.array([1.0, np.inf]), np.array([1.0, 5.0]), "infinity", tol=1.0)


def test_raises_and_guard():
    ok = Checks(0)
    error = ok.raises(ValueError, "bad .* value", lambda: int("x1"), "int")
    assert isinstance(error, ValueError) and ok.items[-1]["ok"] is False  # message mismatch
    assert ok.raises(KeyError, "k", lambda: {}["k"], "key") is not None and ok.items[-1]["ok"]
    assert ok.raises(KeyError, "", lambda: None, "no error") is None
    assert ok.items[-1]["detail"] == "did not raise"
    ok.raises(KeyError, "", lambda: 1 / 0, "other error")
    assert ok.items[-1]["detail"] == "raised ZeroDivisionError: division by zero"
    with ok.guard("inside the block"):
        raise RuntimeError("lost the thread")
    assert ok.items[-1] == {"check": "inside the block", "ok": False,
                            "detail": "raised RuntimeError: lost the thread"}


@pytest.mark.parametrize("fail", [False, True])
def test_finish_reports_and_sets_the_exit_status(capsys, fail):
    ok = Checks(2)
    ok.true(not fail, "it")
    with pytest.raises(SystemExit) as exit_:
        ok.finish()
    assert exit_.value.code == int(fail)
    assert capsys.readouterr().out == ("RANK 2 FAIL: it\n" if fail else "RANK 2 OK 1 checks\n")


def test_rank_data_is_each_ranks_own_and_rebuildable():
    assert np.array_equal(rank_data(1, 7, (3, 2)), rank_data(1, 7, (3, 2)))
    assert not np.array_equal(rank_data(0, 7, (3, 2)), rank_data(1, 7, (3, 2)))
    assert rank_data(0, 1, (4,), np.int32).dtype == np.int32
    assert rank_data(0, 1, (4,), np.float64).dtype == np.float64


# -- runs on ranks --------------------------------------------------------------------

def test_a_failed_check_is_reported_by_rank_and_name():
    run = run_script(2, SCRIPT, "fail")
    assert run.failures() == {1: ["the answer: got 41, expected 42"]}, run.output
    assert run.passed() == [0] and run.returncode != 0
    with pytest.raises(AssertionError, match=r"ranks \[1\] did not report OK\nexited with status "
                                             r"\d+ .*\nrank 1: the answer: got 41, expected 42"):
        assert_ranks_ok(run)


def test_a_rank_that_raises_is_reported():
    run = run_script(2, SCRIPT, "raise")
    assert run.failures() == {1: ["raised ValueError: no such thing"]}, run.output
    assert "Traceback" in run.output and run.returncode != 0
    with pytest.raises(AssertionError, match=r"rank 1: raised ValueError: no such thing"):
        assert_ranks_ok(run)


@pytest.mark.parametrize("n", [0, 2])
def test_a_hanging_run_is_stopped_at_its_timeout_with_nothing_left(n):
    timeout = 10 if n else 6
    start = time.monotonic()
    token = f"run-{uuid.uuid4()}"  # an argument that tells this run's processes from others'
    run = run_script(n, SCRIPT, "hang", token, timeout=timeout)
    assert timeout <= time.monotonic() - start < timeout + 15
    pids = [int(p) for p in re.findall(r"^RANK \d+ PID (\d+)$", run.output, re.M)]
    assert len(pids) == max(n, 1), run.output  # every rank was running when it was stopped
    assert run.timed_out and run.returncode is None
    assert run.ending.startswith(f"timed out after {timeout} s: stopped "
                                 f"{'mpiexec' if n else Path(sys.executable).name} and the ")
    assert not [p for p in pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not [p.info for p in psutil.process_iter(["pid", "cmdline"])
                if token in (p.info["cmdline"] or [])]
    with pytest.raises(AssertionError, match=rf"timed out after {timeout} s"):
        assert_ranks_ok(run)


def test_zero_ranks_is_one_plain_process():
    command = [sys.executable, "-c", "print('RANK 0 OK 1 checks')"]
    assert mpi_command(0, command) == command
    assert mpi_command(2, command)[1:3] == ["-n", "2"]
    with pytest.raises(DpnbError, match="n must be a number of ranks, or 0 for one plain process"):
        mpi_command(-1, command)
    run = run_ranks(0, command)
    assert isinstance(run, RanksRun) and run.passed() == [0] and run.returncode == 0
    assert_ranks_ok(run)


def test_the_communicator_timeout_of_the_ranks_is_within_the_runs(monkeypatch):
    command = [sys.executable, "-c", "import os; print(os.environ['DPNB_COMM_TIMEOUT'])"]
    monkeypatch.delenv("DPNB_COMM_TIMEOUT", raising=False)
    assert run_ranks(0, command, timeout=40).output == "20\n"
    assert run_ranks(0, command, env={"DPNB_COMM_TIMEOUT": "3"}).output == "3\n"
    monkeypatch.setenv("DPNB_COMM_TIMEOUT", "7")  # the caller's own setting is kept
    assert run_ranks(0, command, timeout=40).output == "7\n"


# -- timing ----------------------------------------------------------------------------

def test_timings_and_median_seconds():
    calls = []
    times = timings(lambda: calls.append(time.sleep(0.01)), repeats=3, warmup=2)
    assert len(calls) == 5 and len(times) == 3 and all(0.01 <= t < 0.2 for t in times)
    assert 0.01 <= median_seconds(lambda: time.sleep(0.01), repeats=3) < 0.2


@pytest.mark.parametrize("shuffle", [False, True])
def test_time_in_turns_medians_of_known_durations(shuffle):
    order, syncs = [], []
    fns = {name: (lambda name=name, s=s: (order.append(name), time.sleep(s)))
           for name, s in (("short", 0.01), ("long", 0.04))}
    t = time_in_turns(fns, reps=5, warmup=1, sync=lambda: syncs.append(1), shuffle=shuffle)
    assert 0.01 <= t["short"] < 0.01 + 0.1 and 0.04 <= t["long"] < 0.04 + 0.1
    assert len(order) == 12 and len(syncs) == 2 * 10  # synchronised around each timed call
    turns = [order[k:k + 2] for k in range(2, 12, 2)]
    assert all(sorted(turn) == ["long", "short"] for turn in turns)
    in_order = all(turn == ["short", "long"] for turn in turns)
    assert in_order == (not shuffle)  # shuffled (seeded): some turn runs "long" first


def test_time_in_turns_gives_the_slowest_ranks_time():
    run = run_script(2, SCRIPT, "time")
    assert_ranks_ok(run)
    times = re.findall(r"^RANK \d+ TIMES even=(\S+) uneven=(\S+)$", run.output, re.M)
    assert len(times) == 2 and times[0] == times[1]  # every rank gets the same medians


def command_line(p: psutil.Process) -> list[str]:
    """``p``'s command line, or [] where it ended (or is a zombie) since it was listed:
    mpiexec's short-lived helpers do."""
    try:
        return p.cmdline()
    except psutil.NoSuchProcess:  # ZombieProcess included
        return []


def test_the_ranks_end_with_a_parent_killed_from_outside():
    """SIGKILL leaves the parent no time to stop its run: the run ends all the same."""
    parent = subprocess.Popen([sys.executable, "-c", "from dpnb.testing import run_script; "
                               f"run_script(2, {str(SCRIPT)!r}, 'hang', timeout=120)"])
    tree: list[psutil.Process] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.2)
        tree = psutil.Process(parent.pid).children(recursive=True)
        if sum(command_line(p)[:2] == [sys.executable, str(SCRIPT)] for p in tree) == 2:
            break
    else:
        pytest.fail(f"the ranks did not start: {tree}")
    parent.kill()
    parent.wait()
    _, alive = psutil.wait_procs(tree, timeout=15)
    for p in alive:
        p.kill()
    assert not alive, f"left running after the parent was killed: {alive}"
