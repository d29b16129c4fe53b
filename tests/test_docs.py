"""The docs build, their examples run, and every command they and the README show works.

- ``docs/`` builds with Sphinx, warnings as errors, and its examples pass
  ``sphinx-build -b doctest``; the performance tables come from benchmarks/results.
- The README's notebook example runs, cell by cell, on a fresh 2-engine cluster.
- Every command of a ```bash block in README.md and docs/*.md: the set-up commands are
  checked to be there (and the test one to be what .ci/run runs), never run; cheap
  commands are run as written; every other ``dpnb`` command is parsed by dpnb's own
  argument parser; every repository path a command names exists, every module it runs
  with ``python -m`` is importable, every extra it installs is in pyproject.toml."""
from __future__ import annotations

import html
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from checkout import repository_status

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README = REPO / "README.md"
BIN = Path(sys.executable).parent          # the environment's bin/: the commands' .venv/bin/
PAGES = [README, *sorted(DOCS.glob("*.md"))]

# The README's two set-up commands: they make the environment this suite runs in, so they
# are checked to be there, never run here.
SETUP = [
    "python3 -m venv .venv && .venv/bin/pip install -q -e '.[mpich,cluster]' && .venv/bin/dpnb tutorial",
    "python3 -m venv .venv && .venv/bin/pip install -q -e '.[mpich,test]' && .venv/bin/python -m pytest",
]
RUN_DIR = "/tmp/dpnb-run"   # where the README's `dpnb run` example writes
# Commands cheap enough to run as written (a few seconds in all), with what their output
# must contain.
RUN = {
    ".venv/bin/dpnb --version": "dpnb ",
    ".venv/bin/dpnb doctor": "ready for MPI engines",
    ".venv/bin/dpnb demo --steps 3": "training the tutorial network",
    ".venv/bin/dpnb cluster --help": "status",
    f".venv/bin/dpnb run tests/nnabla_programs/classification.py -o {RUN_DIR} --result {RUN_DIR}":
        "Training loss",
    f".venv/bin/mpiexec -n 2 .venv/bin/dpnb run tests/nnabla_programs/classification.py "
    f"-o {RUN_DIR} --result {RUN_DIR}": "Training loss",
    f".venv/bin/python -m dpnb run tests/nnabla_programs/classification.py -o {RUN_DIR} "
    f"--result {RUN_DIR}": "Training loss",
    ".venv/bin/dpnb notebooks ~/dpnb-tutorials": "copied",     # with HOME in pytest's tmp_path
    ".venv/bin/python docs/_ext/benchmark_table.py": "| what | dpnb | reference (same run) |",
    ".venv/bin/dpnb profile install": "installed the IPython profile 'mpi'",
    "OMP_NUM_THREADS=1 .venv/bin/mpiexec -n 2 .venv/bin/python -m dpnb.examples.cifar10 -c cpu "
    "--dataset digits -o ~/dpnb-runs/digits": "final test accuracy",   # HOME: pytest's tmp_path
}
# The shell session of docs/clusters.md, run in order, with what each step must print.
CLUSTER_SESSION = {
    ".venv/bin/dpnb cluster start -n 2": "stop with: dpnb cluster stop",
    ".venv/bin/dpnb cluster status": "2 engines run in profile 'mpi'",
    ".venv/bin/dpnb cluster where": "2 of 2 ranks answered",
    ".venv/bin/dpnb cluster stop": "stopped the cluster in profile 'mpi'",
}
# Commands shown but not run by the suite, and why.
NOT_RUN = {
    ".venv/bin/pip install -e '.[mpich,cluster,lab]'": "a set-up command: the suite runs in the "
                                                       "environment the test command installed",
    ".venv/bin/jupyter lab '~/dpnb-tutorials'": "a server that runs until stopped: "
                                                "tests/test_browser.py starts JupyterLab on "
                                                "these notebooks and drives it",
}
TOP_LEVEL = {p.name for p in REPO.iterdir() if not p.name.startswith(".")} | {".ci"}


def sphinx(builder: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b",
                           builder, str(DOCS), str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def benchmark_table():
    spec = importlib.util.spec_from_file_location("benchmark_table",
                                                  DOCS / "_ext" / "benchmark_table.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("benchmark_table", module)   # its dataclass looks itself up there
    spec.loader.exec_module(sys.modules["benchmark_table"])
    return sys.modules["benchmark_table"]


# -- building ------------------------------------------------------------------------------

def test_the_docs_build_without_warnings(tmp_path):
    done = sphinx("html", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.strip() == "", done.stderr
    pages = {p.stem for p in tmp_path.glob("*.html")}
    assert {"index", "guide", "clusters", "communicator", "nnabla", "performance",
            "reliability", "testing", "troubleshooting", "architecture", "api"} <= pages
    api = (tmp_path / "api.html").read_text()
    # the numpydoc sections of the public API, rendered by napoleon
    for name in ("dpnb.cluster.start", "dpnb.notebook.compare", "dpnb.notebook.gather_grads",
                 "dpnb.notebook.check_sync", "MultiProcessCommunicator"):
        assert f'id="{name}' in api or f'id="dpnb.communicators.{name}' in api, name
    assert "Parameters" in api and "Returns" in api
    # the performance tables are the result files' figures
    table = benchmark_table()
    performance = (tmp_path / "performance.html").read_text()
    for section in table.SECTIONS:
        for row in table.table(section):
            assert html.escape(row.dpnb, quote=False) in performance, (section, row)
    cluster = json.loads((REPO / "benchmarks" / "results" / "cluster.json").read_text())
    ratio = f"{cluster['results'][0]['ratio']:.2f}x"
    assert ratio in performance


def test_the_readme_performance_table_is_the_result_files():
    """README's table is the ``readme`` section generated from benchmarks/results."""
    text = README.read_text()
    assert benchmark_table().with_readme_table(text) == text, (
        "README.md's performance table is not the result files': run "
        ".venv/bin/python docs/_ext/benchmark_table.py --write-readme")


def test_the_docs_examples_run(tmp_path):
    done = sphinx("doctest", tmp_path)
    report = (tmp_path / "output.txt").read_text() if (tmp_path / "output.txt").exists() else ""
    assert done.returncode == 0, done.stdout + done.stderr + report
    tests = int(re.search(r"^\s+(\d+) tests?$", report, re.M).group(1))
    assert tests >= 5, report     # the tour, the settings, the test harness
    assert re.search(r"^\s+0 failures in tests$", report, re.M), report


def test_a_result_file_without_a_figure_fails_the_table(tmp_path):
    table = benchmark_table()
    for path in (REPO / "benchmarks" / "results").glob("*.json"):
        shutil.copy(path, tmp_path / path.name)
    data = json.loads((tmp_path / "train_step.json").read_text())
    del data["ratio_time"]
    (tmp_path / "train_step.json").write_text(json.dumps(data))
    with pytest.raises(KeyError, match="train_step.json has no ratio_time"):
        table.table("training", tmp_path)
    assert table.table("cluster", tmp_path)[0].ratio.endswith("x")


def test_the_communicator_page_has_every_setting_with_its_default():
    from dpnb.communicators import settings

    variables = re.findall(r"``(DPNB_COMM_\w+)``", settings.__doc__)
    assert len(variables) == 6, variables
    defaults = settings.from_environment({})
    expected = {"DPNB_COMM_TIMEOUT": f"{defaults.timeout:g}",
                "DPNB_COMM_STALL": f"{defaults.stall_seconds:g}",
                "DPNB_COMM_CHECK": "on" if defaults.check_agreement else "off",
                "DPNB_COMM_NCCL": "on" if defaults.use_nccl else "off",
                "DPNB_COMM_SEGMENT_BYTES": f"{defaults.segment_bytes:,}",
                "DPNB_COMM_BUCKET_BYTES": f"{defaults.bucket_bytes:,}"}
    assert set(variables) == set(expected)
    rows = {line.split("|")[3].strip(" `"): line
            for line in (DOCS / "communicator.md").read_text().splitlines()
            if line.startswith("| ") and "`DPNB_COMM_" in line}
    assert set(rows) == set(expected)
    for variable, default in expected.items():
        cells = [c.strip() for c in rows[variable].split("|")]
        assert cells[5].startswith(default), (variable, cells[5], default)
    assert f"{settings.HOSTS_SEGMENT_BYTES:,}" in rows["DPNB_COMM_SEGMENT_BYTES"]


# -- the README's notebook example ------------------------------------------------------------

def readme_notebook_cells() -> list[str]:
    text = README.read_text()
    section = text[text.index("## In a notebook"):text.index("## nnabla programs")]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_readme_notebook_example_runs(tmp_path, ipython_dir):
    import nbformat

    from dpnb.tutorial_command import execute, reap

    cells = readme_notebook_cells()
    assert cells[0].startswith("import dpnb") and "cluster.stop()" in cells[-1]
    assert sum(c.startswith("%%px") for c in cells) == 2
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    path = tmp_path / "readme.ipynb"
    nbformat.write(notebook, path)
    try:
        done = execute(path, str(ipython_dir), timeout=120)
    finally:
        left = reap("IPYTHONDIR", str(ipython_dir))
    assert left == [], f"processes left after the README's example: {left}"
    shown = done.cells[-1].outputs[-1]["data"]["text/plain"]
    rows = [line.split() for line in shown.splitlines()]
    assert [r[-1] for r in rows if r and r[0] == "after"] == ["yes", "yes"], shown
    assert "NO" in [r[-1] for r in rows if r and r[0] == "before"], shown


# -- the commands ---------------------------------------------------------------------------

def bash_blocks(path: Path) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```", path.read_text(), re.S | re.M)


def command_lines() -> list[tuple[Path, str]]:
    """Every command line of every bash block, comments and blank lines left out."""
    found = []
    for path in PAGES:
        for block in bash_blocks(path):
            for line in block.splitlines():
                words = shlex.split(line, comments=True)
                if words:
                    found.append((path, shlex.join(words)))
    return found


def commands(line: str) -> list[list[str]]:
    """The simple commands of a line joined by ``&&``."""
    parts, current = [], []
    for word in shlex.split(line, comments=True):
        if word == "&&":
            parts.append(current)
            current = []
        else:
            current.append(word)
    return [*parts, current]


def executable(word: str) -> Path | None:
    """Where a command's program is: the environment's bin/ for .venv/bin/X, python and
    python3, else PATH."""
    name = word[len(".venv/bin/"):] if word.startswith(".venv/bin/") else word
    if name in ("python", "python3"):
        return Path(sys.executable)
    if (BIN / name).exists():
        return BIN / name
    found = shutil.which(name)
    return Path(found) if found else None


def repository_paths(words: list[str]) -> list[str]:
    """The words that name a file or folder of the repository."""
    return [w for w in words if re.fullmatch(r"[\w.-]+(/[\w.*<>-]+)*/?", w) and "/" in w
            and w.split("/")[0] in TOP_LEVEL]


def dpnb_arguments(words: list[str]) -> list[str] | None:
    """The arguments of a ``dpnb`` command (``dpnb ...`` or ``python -m dpnb ...``)."""
    name = Path(words[0]).name
    if name == "dpnb":
        return words[1:]
    if name.startswith("python") and words[1:3] == ["-m", "dpnb"]:
        return words[3:]
    return None


def check_command(words: list[str], extras: set[str]) -> list[str]:
    """What is wrong with one simple command (an empty list where nothing is)."""
    problems = []
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words = words[1:]
    if Path(words[0]).name == "mpiexec":
        if executable(words[0]) is None:
            problems.append(f"no {words[0]}")
        assert words[1] == "-n" and words[2].isdigit(), words
        words = words[3:]
    if executable(words[0]) is None:
        problems.append(f"no program {words[0]!r} in {BIN} or on PATH")
    problems += [f"no {p} in the repository" for p in repository_paths(words)
                 if not list(REPO.glob(p.rstrip("/")))]
    arguments = dpnb_arguments(words)
    if arguments is not None:
        from dpnb.cli import parser

        try:
            parsed = parser().parse_args(arguments)
        except SystemExit as e:
            if e.code != 0:        # --help and --version exit 0
                problems.append(f"dpnb refuses {shlex.join(arguments)!r}")
        else:
            script = getattr(parsed, "script", None) or getattr(parsed, "program", None)
            if isinstance(script, list):
                script = script[0] if script else None
            if parsed.command == "run" and not (REPO / script).is_file():
                problems.append(f"dpnb run: no program {script}")
    elif Path(words[0]).name.startswith("python") and words[1:2] == ["-m"]:
        try:
            found = importlib.util.find_spec(words[2])
        except ModuleNotFoundError:      # its package is missing
            found = None
        if found is None:
            problems.append(f"no module {words[2]}")
    elif Path(words[0]).name.startswith("python") and len(words) > 1:
        if not (REPO / words[1]).is_file():
            problems.append(f"no script {words[1]}")
    if Path(words[0]).name == "pip" and "install" in words:
        for word in words:
            match = re.fullmatch(r"\.\[([\w,-]+)\]", word)
            if match:
                problems += [f"no extra {e!r} in pyproject.toml"
                             for e in match.group(1).split(",") if e not in extras]
    return problems


def test_the_set_up_commands_are_the_readmes_and_ci_runs_the_test_one():
    lines = [line for block in bash_blocks(README) for line in block.splitlines()]
    for command in SETUP:
        assert command in lines, command
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == SETUP[1]


def test_every_command_of_the_readme_and_docs_parses_and_names_what_exists():
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())
                 ["project"]["optional-dependencies"])
    found = command_lines()
    assert len(found) >= 15, found
    lines = {line for _, line in found}
    for command in RUN:
        assert shlex.join(shlex.split(command)) in lines, f"{command!r} is no longer shown"
    problems = []
    for path, line in found:
        for words in commands(line):
            problems += [f"{path.relative_to(REPO)}: {line}: {p}"
                         for p in check_command(words, extras)]
    assert problems == []
    # the checker does catch what is wrong
    assert check_command(["dpnb", "clusterr", "start"], extras)
    assert check_command(["dpnb", "run", "tests/no_such_program.py"], extras)
    assert check_command(["python", "-m", "dpnb.no_such_module"], extras)
    assert check_command([".venv/bin/pip", "install", "-e", ".[mpich,nonsense]"], extras)
    assert check_command(["python", "benchmarks/no_such_benchmark.py"], extras)


def test_every_command_shown_is_run_or_says_why_not():
    known = {shlex.join(shlex.split(c)) for c in [*SETUP, *RUN, *CLUSTER_SESSION, *NOT_RUN]}
    assert sorted({line for _, line in command_lines()} - known) == []


def test_the_cluster_session_runs_as_written(tmp_path):
    shown = {line for _, line in command_lines()}
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("IPYTHONDIR", None)            # the profile "mpi" of this HOME, as a user has it
    try:
        for command, expected in CLUSTER_SESSION.items():
            assert command in shown, f"{command!r} is no longer shown"
            done = subprocess.run(shlex.split(command.replace(".venv/bin/", f"{BIN}/")),
                                  cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
            assert done.returncode == 0, f"{command}:\n{done.stdout}{done.stderr}"
            assert expected in done.stdout, f"{command}:\n{done.stdout}"
    finally:
        subprocess.run([str(BIN / "dpnb"), "cluster", "stop"], env=env, capture_output=True,
                       timeout=180)


@pytest.mark.parametrize("command", list(RUN))
def test_the_cheap_commands_run_as_written(command, tmp_path):
    shown = shlex.join(shlex.split(command))
    assert shown in {line for _, line in command_lines()}, f"{command!r} is no longer shown"
    started = time.time() - 1    # RUN_DIR is not emptied: another run of this suite may use it
    env = {**os.environ, "IPYTHONDIR": str(tmp_path / "ipython"), "HOME": str(tmp_path)}
    before = repository_status()
    done = subprocess.run(["bash", "-c", command.replace(".venv/bin/", f"{BIN}/")], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert RUN[command] in output, output
    assert repository_status() == before, "the command wrote into the checkout"
    if " run " in command:
        ranks = 2 if "mpiexec" in command else 1
        written = [Path(RUN_DIR) / f"rank{r}.json" for r in range(ranks)]
        assert all(p.is_file() and p.stat().st_mtime >= started for p in written), written
    if " notebooks " in command:
        copied = sorted(p.name for p in (tmp_path / "dpnb-tutorials").glob("*.ipynb"))
        assert copied == ["01_data_parallel_training.ipynb", "01_data_parallel_training.ja.ipynb",
                          "02_cifar10_data_parallel.ipynb"]


def test_the_readmes_links_lead_somewhere():
    links = re.findall(r"\]\(([^)]+)\)", README.read_text())
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert len(local) >= 10, local
    missing = [link for link in local if not (REPO / link.split("#")[0]).exists()]
    assert missing == []
