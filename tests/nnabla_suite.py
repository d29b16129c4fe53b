"""nnabla's own unit tests (v1.39.0, ``../shared/nnabla-tests``), unmodified, run on dpnb.

    python tests/nnabla_suite.py            # the quick subset: 2 parametrizations a test
    python tests/nnabla_suite.py --full     # every parametrization (about 30,000 tests)
    python tests/nnabla_suite.py function/test_abs.py test_graph.py   # these files only
    python tests/nnabla_suite.py --family "double backward"   # one family's tests only
    python tests/nnabla_suite.py --communicator   # communicator/, under mpiexec -n 2

The suite is copied to a temporary folder (CI gets it read-only, and some tests write
beside themselves) and run by pytest in a subprocess with ``nnabla_suite_plugin``, which
makes ``nnabla`` resolve to dpnb before anything imports it.  The tests to run are the
node ids of nnabla's own results file (``nnabla-1.39.0-first2-results.tsv`` or
``-full-results.tsv``); only those the real nnabla passes count.  Each is placed in a
family: double backward and "NumPy 1 only" (tests that need NumPy 1) are counted apart
from the rest ("core").

The report gives, per file, the tests run, passed, failed, and the commonest reasons.

``--communicator`` runs ``communicator/test_*.py`` (or the given files there) on 2 MPI
ranks with the suite's ``--test-communicator``; nnabla has no results for them on the CPU,
so every test collected counts, and a test passes only where it passes on every rank.
Its report gives, per file, the tests collected, passed, failed and skipped, and each
skip's reason."""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUITE = Path(os.environ.get("DPNB_NNABLA_TESTS", REPO.parent / "shared" / "nnabla-tests"))
RESULTS = {"quick": "nnabla-1.39.0-first2-results.tsv", "full": "nnabla-1.39.0-full-results.tsv"}
TIMEOUT_PER_TEST = 120  # seconds; a test that hangs fails alone instead of stopping the run

DOUBLE_BACKWARD = r"_double_backward|^test_grad\.py"
# Tests whose own code calls what NumPy 2 removed (np.product, np.reshape(newshape=)): the
# suite's README counts them as not applicable, since dpnb needs NumPy 2.
NUMPY1_ONLY = (r"^function/test_transpose\.py::test_transpose_forward_backward\b"
               r"|^function/test_scatter_add\.py::test_forward_backward")
FAMILIES = ["core", "double backward", "NumPy 1 only"]
SEVERITY = {"passed": 0, "skipped": 1, "failed": 2, "error": 3, "not run": 4}
CONFTEST_FAILED = 4  # pytest's exit status when a conftest cannot be imported
COMMUNICATOR = "communicator"  # the folder of the tests that run under mpiexec
COMMUNICATOR_RANKS = 2


def family(nodeid: str) -> str:
    """"core", "double backward" or "NumPy 1 only": the family of ``nodeid``."""
    if re.search(NUMPY1_ONLY, nodeid):
        return "NumPy 1 only"
    return "double backward" if re.search(DOUBLE_BACKWARD, nodeid) else "core"


def nnabla_outcomes(selection: str) -> dict[str, str]:
    """Node id -> the real nnabla's outcome, from the suite's results file."""
    path = SUITE / RESULTS[selection]
    rows = (line.rstrip("\n").split("\t") for line in path.read_text().splitlines()
            if line and not line.startswith("#"))
    return {nodeid: outcome for nodeid, outcome in rows}


@dataclass
class Outcome:
    nodeid: str
    outcome: str   # passed, failed, error, skipped, or "not run" (the run stopped first)
    reason: str = ""

    @property
    def file(self) -> str:
        return self.nodeid.split("::")[0]


@dataclass
class Results:
    """The outcomes on dpnb of the tests the real nnabla passes."""
    outcomes: list[Outcome]
    seconds: float
    log_tail: str = field(default="", repr=False)

    def of(self, families: set[str]) -> list[Outcome]:
        return [o for o in self.outcomes if family(o.nodeid) in families]

    def passed(self, families: set[str]) -> int:
        return sum(o.outcome == "passed" for o in self.of(families))

    def report(self) -> str:
        """Per family and per file: run, passed, failed; each file's commonest reasons."""
        lines = [f"nnabla's tests that the real nnabla passes, on dpnb ({self.seconds:.0f} s):"]
        for name in FAMILIES:
            group = self.of({name})
            if group:
                passed = sum(o.outcome == "passed" for o in group)
                lines.append(f"  {name:16s} {passed:6d} of {len(group):6d} passed "
                             f"({100 * passed / len(group):.1f} %)")
        by_file: dict[str, list[Outcome]] = {}
        for o in self.outcomes:
            by_file.setdefault(o.file, []).append(o)
        lines.append("")
        lines.append(f"{'file':60s} {'run':>6s} {'passed':>6s} {'failed':>6s}  family")
        for name, group in sorted(by_file.items()):
            passed = sum(o.outcome == "passed" for o in group)
            families = sorted({family(o.nodeid) for o in group})
            lines.append(f"{name:60s} {len(group):6d} {passed:6d} {len(group) - passed:6d}  "
                         f"{', '.join(families)}")
            reasons = Counter(o.reason or o.outcome for o in group if o.outcome != "passed")
            for reason, count in reasons.most_common(3):
                lines.append(f"      {count:4d} x {reason[:150]}")
        return "\n".join(lines)


def writable_copy(source: Path, target: Path) -> Path:
    """``source`` copied to ``target`` with write permission on everything copied."""
    shutil.copytree(source, target, copy_function=shutil.copyfile)
    for root, dirs, _ in os.walk(target):
        for name in dirs:
            path = Path(root, name)
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    target.chmod(target.stat().st_mode | stat.S_IWUSR)
    return target


def group(path: str) -> str:
    """The folder of a test file under python/test ("" for the top level): each folder runs
    in a pytest of its own, so that a conftest that fails to import stops only its folder."""
    return path.rpartition("/")[0]


def _last_error(log: str) -> str:
    """The last ``E   ...`` line of a pytest log: what stopped a run that recorded nothing."""
    errors = [line[1:].strip() for line in log.splitlines() if line.startswith("E ")]
    return errors[-1][:300] if errors else log.strip()[-300:]


def _environment() -> dict[str, str]:
    """The tests' environment: the plugin importable, one BLAS thread a process."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def _require_suite() -> None:
    if not (SUITE / "python" / "test").is_dir():
        raise FileNotFoundError(f"nnabla's test suite is not at {SUITE}; set DPNB_NNABLA_TESTS "
                                "to the folder holding python/test and the results files")


def run(selection: str = "quick", files: list[str] | None = None,
        workdir: Path | None = None, timeout: float = 3600,
        families: set[str] | None = None) -> Results:
    """Run nnabla's tests of ``selection`` (those in ``files`` only, where given, and of
    ``families`` only, where given) on dpnb."""
    _require_suite()
    expected = [nodeid for nodeid, outcome in nnabla_outcomes(selection).items()
                if outcome == "passed" and (not files or nodeid.split("::")[0] in files)
                and (not families or family(nodeid) in families)]
    paths = sorted({nodeid.split("::")[0] for nodeid in expected})
    env = _environment()
    start = time.monotonic()
    logs, unrecorded = [], {}
    with tempfile.TemporaryDirectory(prefix="dpnb-nnabla-suite-", dir=workdir) as tmp:
        tests = writable_copy(SUITE / "python" / "test", Path(tmp) / "test")
        select, outcomes = Path(tmp) / "select.txt", Path(tmp) / "outcomes.jsonl"
        select.write_text("\n".join(expected) + "\n")
        outcomes.touch()
        for folder in sorted({group(path) for path in paths}):
            command = [sys.executable, "-m", "pytest", "-p", "nnabla_suite_plugin",
                       "--dpnb-select", str(select), "--dpnb-outcomes", str(outcomes),
                       "-p", "no:cacheprovider", "-q", "--no-header", "-rN", "--tb=short",
                       "--continue-on-collection-errors", "--timeout", str(TIMEOUT_PER_TEST),
                       "--rootdir", str(tests), *[p for p in paths if group(p) == folder]]
            left = timeout - (time.monotonic() - start)
            try:
                done = subprocess.run(command, cwd=tests, env=env, capture_output=True,
                                      text=True, timeout=max(left, 1))
                log = done.stdout + done.stderr
                # pytest's usage error (4): a conftest of the folder failed to import
                outcome = "error" if done.returncode == CONFTEST_FAILED else "not run"
            except subprocess.TimeoutExpired as expired:
                log = f"stopped at the run's {timeout} s timeout\n{expired.stdout or ''}"
                outcome = "not run"
            logs.append(log)
            unrecorded[folder] = (outcome, _last_error(log))
        recorded: dict[str, Outcome] = {}
        for line in outcomes.read_text().splitlines():
            record = json.loads(line)
            old = recorded.get(record["nodeid"])
            if old is None or SEVERITY[record["outcome"]] > SEVERITY[old.outcome]:
                recorded[record["nodeid"]] = Outcome(record["nodeid"], record["outcome"],
                                                     record["reason"])
    results = []
    for nodeid in expected:  # a file or conftest that failed to import gives its tests its error
        path = nodeid.split("::")[0]
        found = recorded.get(nodeid) or recorded.get(path)
        results.append(Outcome(nodeid, found.outcome, found.reason) if found else
                       Outcome(nodeid, *unrecorded[group(path)]))
    return Results(results, time.monotonic() - start, "\n".join(logs)[-3000:])


def run_communicator(files: list[str] | None = None, workdir: Path | None = None,
                     timeout: float = 600) -> Results:
    """Run nnabla's communicator tests (``files`` under communicator/, or all) on
    ``COMMUNICATOR_RANKS`` MPI ranks; every test collected counts, and its outcome is the
    worst of its ranks' (passed only where every rank passed)."""
    from dpnb.testing import run_ranks

    _require_suite()
    outside = [f for f in files or [] if group(f) != COMMUNICATOR]
    if outside:
        raise ValueError(f"--communicator runs the tests under {COMMUNICATOR}/ only; "
                         f"got {outside}")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dpnb-nnabla-suite-", dir=workdir) as tmp:
        tests = writable_copy(SUITE / "python" / "test", Path(tmp) / "test")
        outcomes = Path(tmp) / "outcomes.jsonl"
        # -wdir (MPICH's and Open MPI's): the ranks run in the copy, as the quick subset does
        command = ["-wdir", str(tests), sys.executable, "-m", "pytest", "-p",
                   "nnabla_suite_plugin", "--dpnb-communicator", "--dpnb-outcomes", str(outcomes),
                   "--test-communicator", "-p", "no:cacheprovider", "-q", "--no-header", "-rN",
                   "--tb=short", "--continue-on-collection-errors", "--timeout",
                   str(TIMEOUT_PER_TEST),
                   "--rootdir", str(tests), *(files or [COMMUNICATOR])]
        env = _environment()
        env.setdefault("DPNB_COMM_TIMEOUT", str(TIMEOUT_PER_TEST // 2))
        ran = run_ranks(COMMUNICATOR_RANKS, command, timeout=timeout, env=env)
        per_rank = [_rank_records(outcomes.with_name(f"{outcomes.name}.rank{rank}"))
                    for rank in range(COMMUNICATOR_RANKS)]
    stopped = _last_error(ran.output) if ran.returncode not in (0, 1) else ""
    nodeids = list(dict.fromkeys(n for records in per_rank for n in records))
    results = []
    for nodeid in nodeids:
        found = [(rank, records.get(nodeid) or records.get(nodeid.split("::")[0]))
                 for rank, records in enumerate(per_rank)]
        rank, worst = max(found, key=lambda f: SEVERITY[f[1].outcome] if f[1] else 5)
        if worst is None:
            results.append(Outcome(nodeid, "not run", f"rank {rank}: {ran.ending}; {stopped}"))
        elif worst.outcome == "passed":
            results.append(Outcome(nodeid, "passed"))
        else:
            results.append(Outcome(nodeid, worst.outcome, f"rank {rank}: {worst.reason}"))
    if not nodeids:
        results.append(Outcome(COMMUNICATOR, "not run", f"{ran.ending}; {stopped}"))
    return Results(results, time.monotonic() - start, ran.output[-3000:])


def _rank_records(path: Path) -> dict[str, Outcome | None]:
    """One rank's outcomes by node id (its tests collected first, None until recorded);
    a test recorded more than once keeps its worst outcome."""
    records: dict[str, Outcome | None] = {}
    lines = path.read_text().splitlines() if path.exists() else []
    for record in map(json.loads, lines):
        if record["outcome"] == "collected":
            records.setdefault(record["nodeid"], None)
            continue
        old = records.get(record["nodeid"])
        if old is None or SEVERITY[record["outcome"]] > SEVERITY[old.outcome]:
            records[record["nodeid"]] = Outcome(record["nodeid"], record["outcome"],
                                                record["reason"])
    return records


def communicator_report(results: Results) -> str:
    """Per file: tests collected, passed, failed (errors and tests not run included) and
    skipped; each failure's commonest reasons, and every skip's reason."""
    lines = [f"nnabla's communicator tests on {COMMUNICATOR_RANKS} MPI ranks, on dpnb "
             f"({results.seconds:.0f} s):",
             f"{'file':60s} {'tests':>6s} {'passed':>6s} {'failed':>6s} {'skipped':>7s}"]
    by_file: dict[str, list[Outcome]] = {}
    for o in results.outcomes:
        by_file.setdefault(o.file, []).append(o)
    for name, group_ in sorted(by_file.items()):
        counts = Counter(o.outcome for o in group_)
        lines.append(f"{name:60s} {len(group_):6d} {counts['passed']:6d} "
                     f"{len(group_) - counts['passed'] - counts['skipped']:6d} "
                     f"{counts['skipped']:7d}")
        failed = Counter(o.reason or o.outcome for o in group_
                         if o.outcome not in ("passed", "skipped"))
        for reason, count in failed.most_common(3):
            lines.append(f"      {count:4d} x {reason[:150]}")
        for reason, count in Counter(o.reason for o in group_ if o.outcome == "skipped").items():
            lines.append(f"      {count:4d} x skipped: {reason[:150]}")
    counts = Counter(o.outcome for o in results.outcomes)
    lines.append(f"{'total':60s} {len(results.outcomes):6d} {counts['passed']:6d} "
                 f"{len(results.outcomes) - counts['passed'] - counts['skipped']:6d} "
                 f"{counts['skipped']:7d}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", help="test files relative to python/test (all in "
                                                 "scope if none)")
    parser.add_argument("--full", action="store_true", help="every parametrization, not the "
                                                            "first two of each test")
    parser.add_argument("--communicator", action="store_true",
                        help=f"the tests under {COMMUNICATOR}/ on {COMMUNICATOR_RANKS} MPI ranks")
    parser.add_argument("--family", action="append", choices=FAMILIES,
                        help="only the tests of this family (may be given more than once)")
    parser.add_argument("--json", help="write every outcome to this file")
    args = parser.parse_args(argv)
    if args.communicator:
        results = run_communicator(args.files, timeout=3600)
        print(communicator_report(results))
    else:
        results = run("full" if args.full else "quick", args.files, timeout=6 * 3600,
                      families=set(args.family or ()))
        print(results.report())
    if args.json:
        Path(args.json).write_text(json.dumps([o.__dict__ for o in results.outcomes], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
