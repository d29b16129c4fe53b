"""benchmarks/gpu_check.py's own logic, run with --cpu-dry-run: the CuPy stand-in
(tests/standin) plays the GPU, so every stage's code but NCCL's runs on a machine
without one."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"
STAGES = ["environment", "functions", "solvers", "resnet23", "save_load", "comm_nccl",
          "comm_host_staged", "comm_nccl_2gpus", "time_resnet23", "time_allreduce_nccl",
          "time_allreduce_host_staged", "time_allreduce_nccl_2gpus"]
NCCL_STAGES = {"comm_nccl", "comm_nccl_2gpus", "time_allreduce_nccl", "time_allreduce_nccl_2gpus"}


def dry_run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """Run the script with --cpu-dry-run --quick; its process and its JSON results."""
    results = tmp_path / "gpu_check.json"
    process = subprocess.run([sys.executable, str(SCRIPT), "--cpu-dry-run", "--quick",
                              "--json", str(results), *args],
                             capture_output=True, text=True, timeout=90)
    return process, json.loads(results.read_text())


def summary_rows(stdout: str) -> dict[str, str]:
    """Stage -> result, from the summary's Markdown table."""
    table = stdout.split("## summary", 1)[1]
    return dict(re.findall(r"^\| (\w+) +\| (PASS|FAIL|SKIP) +\|", table, re.M))


def test_dry_run_passes_and_lists_every_stage(tmp_path):
    process, results = dry_run(tmp_path)
    output = process.stdout + process.stderr
    assert process.returncode == 0, output
    assert summary_rows(process.stdout) == {
        stage: "SKIP" if stage in NCCL_STAGES else "PASS" for stage in STAGES}, output
    assert results["passed"] and results["mode"] == "cpu-dry-run"
    assert [row["stage"] for row in results["stages"]] == STAGES
    rows = {row["stage"]: row for row in results["stages"]}
    assert rows["environment"]["numbers"]["cupy"].endswith("+standin")
    assert "over host-staged MPI" in rows["comm_host_staged"]["summary"]
    timing = rows["time_resnet23"]["numbers"]
    assert timing["step_ms"] > 0
    if "torch_step_ms" in timing:
        assert timing["ratio"] == pytest.approx(timing["step_ms"] / timing["torch_step_ms"])
    sweep = rows["time_allreduce_host_staged"]["numbers"]["sweep"]
    assert [row["bytes"] for row in sweep] == [4 << 10, 256 << 10, 1 << 20]
    assert all(row["algbw_gbps"] > 0 and row["copy_gbps"] > 0 for row in sweep)


@pytest.mark.parametrize("stage, message", [
    ("functions", r"FAIL: \w+:[^:\n]+: y0: max \|got - expected\| / max \|expected\|"),
    ("comm_host_staged", r"RANK 1 FAIL: all_reduce flat-storage gradient 0, division=False"),
])
def test_a_failed_check_fails_the_run_with_a_clear_message(tmp_path, stage, message):
    process, results = dry_run(tmp_path, "--only", stage, "--inject-failure", stage)
    assert process.returncode == 1
    assert re.search(message, process.stdout), process.stdout + process.stderr
    assert summary_rows(process.stdout) == {"environment": "PASS", stage: "FAIL"}
    assert f"FAILED: {stage}" in process.stdout
    assert not results["passed"]
