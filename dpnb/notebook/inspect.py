"""Bring values from every rank into the notebook and compare them.

``gather`` answers a per-rank mapping; ``gather_grads`` every parameter's
gradient on every rank; ``compare`` shows whether the ranks agree (before and
after all_reduce); ``check_sync`` compares parameter checksums computed on the
engines and pulls only the parameters that differ."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..cluster.engine import calls
from .table import ShownAsTable, Table


def _view(view):
    """The given DirectView, else the current cluster's."""
    if view is not None:
        return view
    from ..cluster.registry import current

    return current().view


def summarize(value, values: int = 4) -> str:
    """A one-line summary: arrays by dtype, shape, norm and their first few values."""
    if isinstance(value, np.ndarray) and value.size > 1:
        flat = value.reshape(-1)
        head = np.array2string(flat[:values], precision=4, separator=", ")[1:-1]
        more = ", ..." if flat.size > values else ""
        norm = float(np.linalg.norm(flat.astype(np.float64))) if flat.dtype.kind in "fiub" else "-"
        norm = f"{norm:.6g}" if isinstance(norm, float) else norm
        return f"{value.dtype}{tuple(value.shape)} norm={norm} [{head}{more}]"
    if isinstance(value, np.ndarray):  # one value (or none), to the same 4 digits
        head = np.array2string(value.reshape(-1), precision=4, separator=", ")
        return f"{value.dtype}{tuple(value.shape)} {head}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class PerRank(ShownAsTable, dict):
    """Rank -> value, shown as a table (dicts of arrays get one row per entry)."""

    def __init__(self, values: dict, title: str = ""):
        super().__init__(values)
        self.title = title

    def table(self) -> Table:
        rows = []
        for rank, value in self.items():
            if isinstance(value, dict):
                rows += [[rank, key, summarize(v)] for key, v in value.items()]
            else:
                rows.append([rank, "", summarize(value)])
        if all(not r[1] for r in rows):
            return Table(["rank", "value"], [[r[0], r[2]] for r in rows], self.title)
        return Table(["rank", "name", "value"], rows, self.title)


def gather(expression: str, view=None) -> PerRank:
    """Evaluate ``expression`` on every engine and bring the values here.

    Parameters
    ----------
    expression : str
        A name or any Python expression, evaluated in each engine's namespace.
    view : ipyparallel.DirectView, optional
        The engines to ask; default: the current cluster's view.

    Returns
    -------
    PerRank
        Rank -> value (a dict, shown as a table in a notebook).
    """
    view = _view(view)
    values = view.apply_sync(calls.evaluate, expression)
    return PerRank(dict(zip(view.targets, values)), title=expression)


def gather_grads(view=None) -> PerRank:
    """Every parameter's gradient from every rank.

    Parameters
    ----------
    view : ipyparallel.DirectView, optional
        The engines to ask; default: the current cluster's view.

    Returns
    -------
    PerRank
        Rank -> {parameter name: gradient as a NumPy array}, the names as
        ``nn.get_parameters()`` gives them on each engine.
    """
    view = _view(view)
    values = view.apply_sync(calls.gradients)
    return PerRank({rank: dict(calls.unpack(v)) for rank, v in zip(view.targets, values)},
                   title="gradients")


def _by_name(gathered: dict) -> dict:
    """rank -> {name: array} from a gather of dicts or of single arrays."""
    return {rank: value if isinstance(value, dict) else {"value": value}
            for rank, value in gathered.items()}


def _norm(array) -> float:
    return float(np.linalg.norm(np.asarray(array, dtype=np.float64).reshape(-1)))


def max_rank_difference(arrays: list) -> float:
    """The largest |a - b| between any rank's array and rank 0's (inf if shapes differ)."""
    first = np.asarray(arrays[0], dtype=np.float64)
    worst = 0.0
    for other in arrays[1:]:
        other = np.asarray(other, dtype=np.float64)
        if other.shape != first.shape:
            return float("inf")
        if first.size:
            worst = max(worst, float(np.max(np.abs(other - first))))
    return worst


@dataclasses.dataclass
class Row:
    stage: str
    name: str
    norms: list[float]
    max_difference: float
    agree: bool


class Comparison(ShownAsTable):
    """Per parameter and stage: each rank's norm, the largest difference between ranks,
    and whether the ranks agree (largest difference <= ``atol``)."""

    def __init__(self, rows: list[Row], ranks: list[int]):
        self.rows = rows
        self.ranks = ranks

    def agree(self, stage: str | None = None) -> bool:
        """Whether every parameter agrees across ranks in ``stage`` (default: the last one)."""
        stage = self.rows[-1].stage if stage is None else stage
        return all(r.agree for r in self.rows if r.stage == stage)

    def table(self) -> Table:
        header = ["stage", "parameter", *[f"norm rank {r}" for r in self.ranks],
                  "max |diff|", "ranks agree"]
        rows = [[r.stage, r.name, *[f"{n:.6g}" for n in r.norms], f"{r.max_difference:.3g}",
                 "yes" if r.agree else "NO"] for r in self.rows]
        return Table(header, rows)


def compare(before: dict, after: dict | None = None, atol: float = 0.0) -> Comparison:
    """Compare ranks in one or two gathers (e.g. gradients before and after all_reduce).

    Parameters
    ----------
    before : dict
        A gather: rank -> array, or rank -> {name: array} (as `gather_grads` gives).
    after : dict, optional
        A second gather of the same names, compared as the stage "after".
    atol : float
        The largest absolute difference between ranks that still counts as agreeing
        (default 0: identical).

    Returns
    -------
    Comparison
        Per name and stage, each rank's norm, the largest difference from rank 0 and
        whether the ranks agree; ``agree("after")`` answers for a whole stage.
    """
    stages = [("before", before), ("after", after)] if after is not None else [("", before)]
    rows: list[Row] = []
    ranks = sorted(before)
    for stage, gathered in stages:
        by_name = _by_name(gathered)
        names = list(dict.fromkeys(n for rank in ranks for n in by_name[rank]))
        for name in names:
            arrays = [by_name[rank].get(name) for rank in ranks]
            if any(a is None for a in arrays):
                rows.append(Row(stage, name, [float("nan")] * len(ranks), float("inf"), False))
                continue
            diff = max_rank_difference(arrays)
            rows.append(Row(stage, name, [_norm(a) for a in arrays], diff, diff <= atol))
    return Comparison(rows, ranks)


@dataclasses.dataclass(repr=False)
class SyncReport(ShownAsTable):
    """Whether parameters are identical on every rank; values only of those that differ."""

    ranks: list[int]
    checked: int
    differing: dict[str, PerRank]

    @property
    def in_sync(self) -> bool:
        return not self.differing

    def table(self) -> Table:
        if self.in_sync:
            return Table(["parameters", "ranks", "identical"],
                         [[self.checked, len(self.ranks), "yes"]])
        rows = []
        for name, values in self.differing.items():
            arrays = [values.get(r) for r in self.ranks]
            present = [a for a in arrays if a is not None]
            diff = max_rank_difference(present) if len(present) == len(arrays) else float("inf")
            rows.append([name, *[f"{_norm(a):.6g}" if a is not None else "missing" for a in arrays],
                         f"{diff:.3g}"])
        return Table(["parameter", *[f"norm rank {r}" for r in self.ranks], "max |diff|"], rows,
                     title=f"{len(self.differing)} of {self.checked} parameters differ "
                           "between ranks")


def check_sync(view=None) -> SyncReport:
    """Whether the parameters are identical on every rank.

    Checksums are computed on the engines; only the parameters that differ are
    pulled into the notebook.

    Parameters
    ----------
    view : ipyparallel.DirectView, optional
        The engines to ask; default: the current cluster's view.

    Returns
    -------
    SyncReport
        ``in_sync`` is True where every parameter is identical across ranks;
        ``differing`` holds the values of those that are not.
    """
    view = _view(view)
    ranks = list(view.targets)
    sums = {rank: dict(s) for rank, s in zip(ranks, view.apply_sync(calls.checksums))}
    names = list(dict.fromkeys(n for s in sums.values() for n in s))
    differing = [n for n in names if len({sums[r].get(n) for r in ranks}) > 1]
    values: dict = {}
    if differing:
        pulled = {rank: dict(calls.unpack(v)) for rank, v in
                  zip(ranks, view.apply_sync(calls.parameter_values, differing))}
        values = {n: PerRank({r: pulled[r].get(n) for r in ranks}, title=n) for n in differing}
    return SyncReport(ranks, len(names), values)
