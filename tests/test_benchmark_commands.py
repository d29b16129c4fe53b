"""The programs in benchmarks/ as commands: each answers ``--help`` at once, measuring and
writing nothing, and a run writes its results only where ``--json PATH`` or ``--record``
(benchmarks/timing.py's ``add_output_options``) says, never over the tracked reference
results in benchmarks/results unasked."""
from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import repository_status

from dpnb.testing import ONE_THREAD

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
RESULTS = BENCHMARKS / "results"
PROGRAMS = sorted(p.name for p in BENCHMARKS.glob("*.py")
                  if 'if __name__ == "__main__":' in p.read_text())
HELPERS = {"timing.py", "revisions.py"}      # modules the programs import, no programs
ENV = {**os.environ, **ONE_THREAD, "PYTHONPATH": str(REPO)}


def repository_state() -> tuple[str, dict[str, int]]:
    """What a command could write into the checkout: git's view of it, and the modification
    times of the reference results."""
    return repository_status(), {p.name: p.stat().st_mtime_ns for p in RESULTS.iterdir()}


def run(program: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCHMARKS / program), *args], cwd=REPO,
                          env=ENV, capture_output=True, text=True, timeout=timeout)


def words(text: str) -> str:
    return " ".join(text.split())


def test_every_script_but_the_helpers_is_a_program():
    names = {p.name for p in BENCHMARKS.glob("*.py")}
    assert names - set(PROGRAMS) == HELPERS
    assert len(PROGRAMS) >= 13, PROGRAMS


@pytest.mark.parametrize("program", PROGRAMS)
def test_help_prints_usage_and_writes_nothing(program):
    before = repository_state()
    done = run(program, "--help", timeout=20)       # a benchmark itself takes minutes
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"usage: {program}"), done.stdout
    summary = ast.get_docstring(ast.parse((BENCHMARKS / program).read_text())).split("\n\n")[0]
    assert words(summary.splitlines()[0]) in words(done.stdout)
    assert "--json PATH" in done.stdout and "--record" in done.stdout
    assert repository_state() == before


def test_a_run_writes_its_results_only_where_asked(tmp_path):
    reference = json.loads((RESULTS / "solver_update.json").read_text())
    before = repository_state()
    printed = run("solver_update.py", "--repeats", "2", timeout=120)
    assert printed.returncode == 0, printed.stdout + printed.stderr
    assert "results not written" in printed.stdout
    assert repository_state() == before

    path = tmp_path / "out" / "solver_update.json"
    written = run("solver_update.py", "--repeats", "2", "--json", str(path), timeout=120)
    assert written.returncode == 0, written.stdout + written.stderr
    assert f"wrote {path}" in written.stdout
    result = json.loads(path.read_text())
    assert [key for key in result if key != "recorded"] == [
        key for key in reference if key != "recorded"]
    when = result["recorded"]                          # when, and on which commit
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", when["date"]), when
    assert re.fullmatch(r"[0-9a-f]{7,}(\+changes)?", when["commit"]), when
    assert re.fullmatch(r"OpenBLAS [0-9.]+ \w+", when["blas"]), when  # NumPy's wheels' BLAS
    assert re.fullmatch(r"numba [0-9.]+", when["kernels"]), when      # the test extra's
    assert result["repeats"] == 2 and set(result["median_seconds"]) == set(
        reference["median_seconds"])
    assert os.listdir(path.parent) == [path.name]      # the temporary file was renamed
    assert repository_state() == before


@pytest.fixture(scope="module")
def timing():
    spec = importlib.util.spec_from_file_location("benchmarks_timing", BENCHMARKS / "timing.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module               # where its dataclass looks itself up
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def parse(timing, *argv: str, record_by_default: bool = False):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    timing.add_output_options(parser, "fileio")
    args = parser.parse_args(argv)
    return args, timing.output_of(args, record_by_default)


@pytest.mark.parametrize("argv, record_by_default, json_path, recorded", [
    ((), False, None, False),
    (("--record",), False, None, True),
    (("--json", "x.json"), False, "x.json", False),
    (("--json", "x.json", "--record"), False, "x.json", True),
    ((), True, None, True),                       # gpu_check.py run on a GPU
    (("--json", "x.json"), True, "x.json", False),
])
def test_the_options_name_the_paths(timing, argv, record_by_default, json_path, recorded):
    args, output = parse(timing, *argv, record_by_default=record_by_default)
    assert vars(args) == {"steps": 3}             # what benchmarks record as their settings
    assert output.json == (Path(json_path) if json_path else None)
    assert output.record == (RESULTS / "fileio.json" if recorded else None)
