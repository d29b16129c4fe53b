"""pytest plugin that runs nnabla's own unit tests on dpnb (loaded by ``nnabla_suite.py``).

Loaded with ``-p``, it makes ``nnabla`` names resolve to dpnb before pytest imports any
conftest or test module, keeps only the node ids listed in ``--dpnb-select``, and writes
each test's outcome, with the first line of its error, as a JSON line to
``--dpnb-outcomes``.  It changes no test and adds no fixture; its one shim gives the
private helpers of nnabla's that tests import to build their references
(``nnabla_private``)."""
from __future__ import annotations

import json
from pathlib import Path

import dpnb
import nnabla_private

dpnb.use_as_nnabla()


nnabla_private.install()


def pytest_addoption(parser):
    group = parser.getgroup("dpnb", "nnabla's suite on dpnb")
    group.addoption("--dpnb-select", required=True, help="file with one node id per line to run")
    group.addoption("--dpnb-outcomes", required=True, help="JSON-lines file of outcomes to write")


def pytest_collection_modifyitems(config, items):
    wanted = set(Path(config.getoption("--dpnb-select")).read_text().split("\n")) - {""}
    selected = [item for item in items if item.nodeid in wanted]
    config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in wanted])
    items[:] = selected


def _reason(report) -> str:
    """The error's first line (``AttributeError: ...``), or the skip's reason."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        text = crash.message
    elif isinstance(report.longrepr, tuple):  # a skip: (file, line, reason)
        text = report.longrepr[2]
    else:
        text = str(report.longrepr or "")
    return text.strip().split("\n")[0][:300]


def _collect_reason(report) -> str:
    """The last line of a collection error's text: the exception that stopped the import."""
    lines = [line for line in str(report.longrepr).splitlines() if line.startswith("E ")]
    return (lines[-1][1:].strip() if lines else str(report.longrepr).strip()[-300:])[:300]


class OutcomeWriter:
    """Appends one JSON line per test (its call's outcome, or its setup's or teardown's
    where that failed) and per file that could not be collected."""

    def __init__(self, path: str):
        self.path = path

    def pytest_runtest_logreport(self, report):
        failed_around = report.when in ("setup", "teardown") and not report.passed
        if report.when != "call" and not failed_around:
            return
        outcome = "error" if failed_around and report.failed else report.outcome
        record = {"nodeid": report.nodeid, "outcome": outcome, "when": report.when,
                  "reason": "" if report.passed else _reason(report)}
        self.write(record)

    def pytest_collectreport(self, report):
        """A file that fails to import: one line for it, which its tests inherit."""
        if report.failed:
            self.write({"nodeid": report.nodeid, "outcome": "error", "when": "collect",
                        "reason": _collect_reason(report)})

    def write(self, record: dict) -> None:
        with open(self.path, "a") as out:
            out.write(json.dumps(record) + "\n")


def pytest_configure(config):
    config.pluginmanager.register(OutcomeWriter(config.getoption("--dpnb-outcomes")))
