"""The performance table, read from ``benchmarks/results/*.json`` (what the benchmark
scripts wrote at their last run with ``--record``), never copied by hand.

In the docs: the ``benchmark-table`` directive (a Sphinx extension).  From a shell:
``python docs/_ext/benchmark_table.py`` prints the same table as Markdown, and
``--write-readme`` puts the ``readme`` section (the training targets) into README.md
between its markers.  A result file that lacks a figure this table reads fails the build
with the file and the key.  Each row says when its file was recorded: the ``recorded``
date and commit the benchmark wrote, or for older files the date git last committed them."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
README = ROOT / "README.md"
README_MARKERS = ("<!-- benchmark-table readme: docs/_ext/benchmark_table.py "
                  "--write-readme writes this table -->", "<!-- end of benchmark-table -->")
HEADER = ("what", "dpnb", "reference (same run)", "ratio", "target", "recorded", "command",
          "file")


@dataclasses.dataclass
class Row:
    what: str
    dpnb: str
    reference: str
    ratio: str
    target: str
    command: str
    file: str
    recorded: str = ""

    def cells(self) -> tuple[str, ...]:
        return (self.what, self.dpnb, self.reference, self.ratio, self.target, self.recorded,
                self.command, self.file)


def recorded_of(path: Path) -> str:
    """When, at which commit and (where it says) with which BLAS kernel and dpnb kernels a
    result file was recorded: what the benchmark wrote in it, or for a file from before
    benchmarks wrote that, the date git committed it."""
    when = json.loads(path.read_text()).get("recorded")
    if when is not None:
        machine = "".join(f", {when[key]}" for key in ("blas", "kernels") if key in when)
        return f"{when['date']} at {when['commit']}{machine}"
    done = subprocess.run(["git", "-C", str(path.parent), "log", "-1", "--format=%cs", "--",
                           path.name], capture_output=True, text=True)
    date = done.stdout.strip() if done.returncode == 0 else ""
    return f"committed {date}" if date else "unknown"


class Results:
    """One result file; ``[key, key, ...]`` reads a nested figure or names what is missing."""

    def __init__(self, name: str, directory: Path = RESULTS):
        self.name = f"{name}.json"
        self.data = json.loads((directory / self.name).read_text())

    def __call__(self, *keys):
        value = self.data
        for key in keys:
            try:
                value = value[key]
            except (KeyError, IndexError, TypeError):
                raise KeyError(f"benchmarks/results/{self.name} has no "
                               f"{'/'.join(map(str, keys))}") from None
        return value


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.3g} µs"


def x(ratio: float) -> str:
    return f"{ratio:.2f}x"


def span(values: list[float], unit) -> str:
    """``unit(min)``–``unit(max)`` of several runs, or one value."""
    low, high = unit(min(values)), unit(max(values))
    return low if low == high else f"{low.split()[0]}–{high}"


def runs_of(runs: list[dict], key: str) -> list[float]:
    return [r[key] for r in runs]


def training(directory: Path) -> list[Row]:
    t = Results("train_step", directory)
    m = Results("models", directory)
    s = Results("tutorial_step", directory)
    rows = [
        Row("ResNet-23 train step, batch 64, nmaps 64, Adam, 1 thread",
            span(runs_of(t("dpnb", "runs"), "step_s"), ms),
            "PyTorch CPU: " + span(runs_of(t("torch", "runs"), "step_s"), ms),
            x(t("ratio_time")) + " time (medians)", "≤ 1.0x",
            "python benchmarks/train_step.py --record", t.name),
        Row("same, peak memory above the empty process", f"{t('dpnb', 'peak_mib'):.0f} MiB",
            f"PyTorch: {t('torch', 'peak_mib'):.0f} MiB", x(t("ratio_memory")), "≤ 1.0x",
            "same", t.name),
    ]
    for key, what in (("lstm", "LSTM language model train step (vocabulary 2000, embedding "
                               "128, 2 layers of 256, 32 steps x batch 16), Adam, 1 thread"),
                      ("transformer", "transformer encoder train step (2 post-norm layers, "
                                      "width 128, 4 heads, feed-forward 256, 32 x 16)")):
        rows.append(Row(what, span(runs_of(m(key, "runs", "dpnb"), "step_s"), ms),
                        "PyTorch CPU, same network: "
                        + span(runs_of(m(key, "runs", "torch"), "step_s"), ms),
                        x(m(key, "ratio_time")) + " time", "≤ 1.0x",
                        "python benchmarks/models.py --record", m.name))
        rows.append(Row("same, peak memory above the empty process",
                        f"{m(key, 'peak_mib', 'dpnb'):.0f} MiB",
                        f"PyTorch: {m(key, 'peak_mib', 'torch'):.0f} MiB",
                        x(m(key, "ratio_memory")), "≤ 1.0x", "same", m.name))
    rows.append(Row("tutorial step (4-function graph, batch 4, forward + backward + Adam), "
                    "1 thread", span(runs_of(s("dpnb", "runs"), "step_s"), us),
                    f"nnabla {s('nnabla_version')} CPU: "
                    + span(runs_of(s("nnabla", "runs"), "step_s"), us),
                    x(s("ratio_time")) + " time", "≤ 1.0x",
                    "python benchmarks/tutorial_step.py --nnabla-python PYTHON --record", s.name))
    g = Results("gradient_penalty", directory)
    rows += [
        Row("WGAN-GP critic step (3 strided convolutions, batch 16, 32x32, the penalty through "
            "nn.grad), Adam, 1 thread", span(runs_of(g("dpnb", "runs"), "step_s"), ms),
            "PyTorch CPU, autograd.grad(create_graph=True): "
            + span(runs_of(g("torch", "runs"), "step_s"), ms),
            x(g("ratio_time")) + " time", "≤ 1.5x",
            "python benchmarks/gradient_penalty.py --record", g.name),
        Row("same critic, first-order step (no penalty)",
            span(runs_of(g("dpnb", "runs"), "first_order_s"), ms),
            "PyTorch CPU: " + span(runs_of(g("torch", "runs"), "first_order_s"), ms),
            x(g("ratio_first_order")) + " time", "—", "same", g.name),
    ]
    return rows


def families(directory: Path) -> list[Row]:
    """The function families added last (issue 28), each against its reference."""
    st, wg, d = (Results(n, directory) for n in ("stft", "warp_by_grid", "deformable"))
    det, c = Results("detection", directory), Results("compression", directory)
    rows = [
        Row("F.stft forward + backward, batch 8 x 16000 samples, n_fft 512, hop 128, 1 thread",
            span(runs_of(st("dpnb", "runs"), "step_s"), ms),
            "PyTorch CPU, torch.stft: " + span(runs_of(st("torch", "runs"), "step_s"), ms),
            x(st("ratio_time")) + " time", "≤ 2x", "python benchmarks/stft.py --record",
            st.name),
        Row("F.warp_by_grid forward + backward, bilinear, batch 8, 32 x 64x64, 1 thread",
            span(runs_of(wg("dpnb", "runs"), "step_s"), ms),
            "PyTorch CPU, grid_sample: " + span(runs_of(wg("torch", "runs"), "step_s"), ms),
            x(wg("ratio_time")) + " time", "≤ 2x",
            "python benchmarks/warp_by_grid.py --record", wg.name),
        Row("F.deformable_convolution forward + backward, batch 8, 64 -> 64, 3x3, 32x32, "
            "1 thread", span(runs_of(d("deformable", "runs"), "step_s"), ms),
            "dpnb's F.convolution, same shape: "
            + span(runs_of(d("convolution", "runs"), "step_s"), ms),
            x(d("ratio_time")) + " time", "≤ 3x", "python benchmarks/deformable.py --record",
            d.name),
    ]
    for key, what in (("roi_align", "F.roi_align forward + backward, 256 boxes, 7x7"),
                      ("nms_detection2d", "F.nms_detection2d, YOLOv2 output 4 x 845 x 85"),
                      ("onnx_nms", "F.onnx_non_max_suppression, 1000 boxes, 20 classes")):
        rows.append(Row(what + ", 1 thread", ms(det("dpnb", key)),
                        f"nnabla {det('nnabla_version')} CPU: {ms(det('nnabla', key))}",
                        x(det("ratio_time", key)) + " time", "—",
                        "python benchmarks/detection.py --nnabla-python PYTHON --record",
                        det.name))
    rows.append(Row("fixed-point quantized CNN train step (PF.fixed_point_quantized_*), "
                    "1 thread", span(runs_of(c("dpnb", "runs"), "step_s"), ms),
                    "PyTorch CPU, same quantization: "
                    + span(runs_of(c("torch", "runs"), "step_s"), ms),
                    x(c("ratio_time")) + " time", "—",
                    "python benchmarks/compression.py --record", c.name))
    return rows


def solver_and_files(directory: Path) -> list[Row]:
    u = Results("solver_update", directory)
    f = Results("fileio", directory)
    per = f("median_seconds")
    return [
        Row(f"{u('solver')} update, {u('parameters')} tensors, {u('values') / 1e6:.1f} M floats",
            ms(u("median_seconds", "fused")),
            "per-parameter NumPy loop, same in-place operations: "
            + ms(u("median_seconds", "per_parameter_in_place")),
            x(u("ratio_to_fused", "per_parameter_in_place")) + " faster", "≥ 5x",
            "OPENBLAS_NUM_THREADS=1 python benchmarks/solver_update.py --record", u.name),
        Row(f"save {f('parameters')} parameters ({f('mebibytes'):.1f} MiB) as nnabla's .h5",
            ms(per[".h5"]["parameters save"]),
            f"np.savez: {ms(per['np.savez / np.load']['parameters save'])} (dpnb's .npz: "
            f"{ms(per['.npz']['parameters save'])})",
            "worst of parameter and state save and load: " + x(f("h5_vs_npz_worst"))
            + " dpnb's .npz", "≤ 1.5x", "python benchmarks/fileio.py --record", f.name),
    ]


def allreduce(directory: Path) -> list[Row]:
    a = Results("allreduce", directory)
    big, small = a("resnet34"), a("small_1000x1KB")
    name = a.name
    cmd = "python benchmarks/allreduce.py --record"
    rows = []
    for op in ("sum", "mean"):
        flat, raw = big[op]["flat_storage_s"], big[op]["raw_one_buffer_s"]
        rows.append(Row(f"all_reduce of flat-storage gradients ({big['tensors']} tensors, "
                        f"{big['bytes'] / 1e6:.0f} MB, {a('ranks')} ranks), {op}", ms(flat),
                        f"one raw Allreduce over the same bytes: {ms(raw)}",
                        x(raw / flat) + " throughput", "≥ 1.5x", cmd if op == "sum" else "same",
                        name))
    rows.append(Row("same, sum, against np.copyto of the same bytes",
                    ms(big["sum"]["flat_storage_s"]), f"memcpy: {ms(big['memcpy_s'])}",
                    x(big["memcpy_s"] / big["sum"]["flat_storage_s"]), "≥ 0.8x", "same", name))
    rows.append(Row("the same list as separate user arrays, sum",
                    ms(big["sum"]["separate_arrays_s"]),
                    f"raw Allreduce: {ms(big['sum']['raw_one_buffer_s'])}",
                    x(big["sum"]["raw_one_buffer_s"] / big["sum"]["separate_arrays_s"]), "≥ 1.0x",
                    "same", name))
    for op in ("sum", "mean"):
        flat, per = small[op]["flat_storage_s"], small[op]["raw_per_tensor_s"]
        rows.append(Row(f"{small['tensors']} tensors of 1 KB, flat storage, {op}", ms(flat),
                        f"one Allreduce per tensor: {ms(per)}", x(per / flat) + " faster",
                        "≥ 10x", "same", name))
    reducer = a("reducer_48MB")
    rows.append(Row(f"{reducer['bytes'] / 2**20:.0f} MiB of flat gradients, division=True",
                    f"reducer {ms(reducer['reducer_s'])}, list {ms(reducer['list_s'])}",
                    f"raw Allreduce in segments, no division: {ms(reducer['raw_segments_s'])}",
                    f"reducer {x(reducer['reducer_vs_raw'])}, list {x(reducer['list_vs_raw'])}",
                    "≤ 1.2x", "same", name))
    tiny = a("tiny_checked")
    rows.append(Row("one-element checked all_reduce", us(tiny["checked_s"]),
                    f"raw mpi4py Allreduce: {us(tiny['raw_s'])}", x(tiny["ratio"]), "≤ 3x",
                    "same", name))
    agreement = a("agreement")
    rows.append(Row(f"agreement check at {agreement['bytes'] / 2**20:.0f} MiB",
                    us(agreement["check_on_s"]), f"unchecked call: {us(agreement['check_off_s'])}",
                    f"{agreement['overhead'] * 100:.1f} % overhead", "≤ 5 %", "same", name))
    staging = a("staging")
    rows.append(Row(f"staging memory over {staging['calls']:,} calls",
                    f"{staging['staging_bytes_before'] / 2**20:.0f} MiB before, "
                    f"{staging['staging_bytes_after'] / 2**20:.0f} MiB after",
                    f"bucket size {staging['bucket_bytes'] / 2**20:.0f} MiB",
                    "no growth" if staging["staging_bytes_after"] == staging["staging_bytes_before"]
                    else "grew", "no growth", "same", name))
    return rows


def cluster(directory: Path) -> list[Row]:
    c = Results("cluster", directory)
    rows = []
    for i, r in enumerate(c("results")):
        rows.append(Row(f"{r['measure']} ({c('engines')} engines)", f"{r['dpnb']:.3g}",
                        f"{r['reference_is']}: {r['reference']:.3g}", x(r["ratio"]),
                        f"≤ {r['target_ratio']}x",
                        "python benchmarks/cluster.py --record" if i == 0 else "same", c.name))
    return rows


def scaling(directory: Path) -> list[Row]:
    s = Results("scaling", directory)
    r = s("results")
    settings = s("settings")
    one = r["one_rank"]["images_per_s"]
    names = (("n_ranks", f"{settings['ranks']} ranks, all_reduce after backward"),
             ("n_ranks_callback", f"{settings['ranks']} ranks, --with-all-reduce-callback"),
             ("n_ranks_sync_bn", f"{settings['ranks']} ranks, --sync-bn"))
    ceiling = r["independent"]["images_per_s"]
    rows = [Row(f"ResNet-23 (nmaps {settings['nmaps']}, batch {settings['batch_size']} per rank, "
                "synthetic), 1 rank", f"{one:.1f} images/s", "", "", "",
                "python benchmarks/scaling.py --record", s.name),
            Row(f"{settings['ranks']} independent 1-rank runs at once (the machine's ceiling)",
                f"{ceiling:.1f} images/s", "", "", "", "same", s.name)]
    for key, what in names:
        value = r[key]["images_per_s"]
        rows.append(Row(what, f"{value:.1f} images/s", f"the ceiling: {ceiling:.1f} images/s",
                        x(value / ceiling), "≥ 0.97x" if key != "n_ranks_sync_bn"
                        else "step ≤ 1.1x the plain step's", "same", s.name))
    return rows


def hosts(directory: Path) -> list[Row]:
    rows = []
    for name, options in (("hosts", ""), ("hosts-block1", " --block 1"),
                          ("hosts-nmaps256", " --nmaps 256")):
        h = Results(name, directory)
        summary = h("summary")
        command = f"python benchmarks/hosts.py{options} --record"
        rows.append(Row(f"2 test hosts x 1 rank, all_reduce (sum) over the veth link "
                        f"({options.strip() or 'the defaults'}), started {h('started')}",
                        f"{summary['sum_dpnb_vs_raw_throughput']:.2f}x raw's throughput "
                        f"(unchecked {summary['sum_unchecked_vs_raw_throughput']:.2f}x)",
                        "raw mpi4py Allreduce of the same bytes", x(summary["sum_dpnb_vs_raw_throughput"]),
                        "≥ 0.9x", command, h.name))
    return rows


def faults(directory: Path) -> list[Row]:
    f = Results("faults", directory)
    return [Row(r["measure"], r["dpnb"], f"{r['reference_is']}: {r['reference']}"
                if r["reference_is"] else r["reference"], r["ratio"], "",
                "python benchmarks/faults.py --record" if i == 0 else "same", f.name)
            for i, r in enumerate(f("table"))]


def against_revision(directory: Path) -> list[Row]:
    a = Results("against_revision", directory)
    return [Row(f"{r['benchmark']}: {r['figure']}", f"{r['this']:.4g} ({a('this')})",
                f"{r['reference']:.4g} ({a('reference')})", x(r["ratio"]), "",
                "python benchmarks/against_revision.py --record" if i == 0 else "same", a.name)
            for i, r in enumerate(a("figures"))]


def readme(directory: Path) -> list[Row]:
    """The README's table: the CPU training targets (the training rows but the gradient
    penalty's, another issue's) and data-parallel scaling on two ranks."""
    two_ranks = next(row for row in scaling(directory)
                     if row.what.endswith("all_reduce after backward"))
    targets = [row for row in training(directory) if row.file != "gradient_penalty.json"]
    return targets + [dataclasses.replace(
        two_ranks, what=f"ResNet-23 data-parallel: {two_ranks.what}",
        command="python benchmarks/scaling.py --record")]


SECTIONS = {
    "readme": readme,
    "training": training,
    "families": families,
    "solver-files": solver_and_files,
    "allreduce": allreduce,
    "cluster": cluster,
    "scaling": scaling,
    "hosts": hosts,
    "faults": faults,
    "against-revision": against_revision,
}


def table(section: str, directory: Path = RESULTS) -> list[Row]:
    """The rows of one section of the table (a key of ``SECTIONS``), each with when its
    file was recorded."""
    rows = SECTIONS[section](directory)
    when = {name: recorded_of(directory / name) for name in {row.file for row in rows}}
    return [dataclasses.replace(row, recorded=when[row.file]) for row in rows]


def markdown(section: str, directory: Path = RESULTS) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row.cells()) + " |"
              for row in table(section, directory)]
    return "\n".join(lines)


def setup(app):
    """Register the ``benchmark-table`` directive: ``{benchmark-table} SECTION``."""
    from docutils import nodes
    from docutils.parsers.rst import Directive

    class BenchmarkTable(Directive):
        required_arguments = 1

        def run(self):
            section = self.arguments[0]
            if section not in SECTIONS:
                raise self.error(f"benchmark-table: unknown section {section!r}; "
                                 f"known: {', '.join(SECTIONS)}")
            try:
                rows = table(section)
            except (KeyError, OSError, ValueError) as e:
                raise self.error(f"benchmark-table {section}: {e}")
            for path in RESULTS.glob("*.json"):
                self.state.document.settings.record_dependencies.add(str(path))
            return [_table_node(nodes, [HEADER, *(r.cells() for r in rows)])]

    app.add_directive("benchmark-table", BenchmarkTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def _table_node(nodes, rows):
    """A docutils table with a header row; commands and file names as literals."""
    node = nodes.table(classes=["benchmark-table"])
    group = nodes.tgroup(cols=len(rows[0]))
    node += group
    for _ in rows[0]:
        group += nodes.colspec(colwidth=1)

    def row_node(cells, literal_from):
        row = nodes.row()
        for i, text in enumerate(cells):
            entry = nodes.entry()
            paragraph = nodes.paragraph()
            if i >= literal_from and text and text != "same":
                paragraph += nodes.literal(text=text)
            else:
                paragraph += nodes.Text(text)
            entry += paragraph
            row += entry
        return row

    head = nodes.thead()
    head += row_node(rows[0], len(rows[0]))
    body = nodes.tbody()
    for cells in rows[1:]:
        body += row_node(cells, len(HEADER) - 2)
    group += head
    group += body
    return node


def with_readme_table(text: str, directory: Path = RESULTS) -> str:
    """``text`` (the README) with the ``readme`` section's table between its markers."""
    start, end = README_MARKERS
    if start not in text or end not in text:
        raise ValueError(f"README.md lacks the markers {start!r} and {end!r}")
    head, rest = text.split(start, 1)
    return f"{head}{start}\n{markdown('readme', directory)}\n{end}{rest.split(end, 1)[1]}"


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-readme"]:
        README.write_text(with_readme_table(README.read_text()))
        print(f"wrote the readme table into {README}")
    else:
        for name in SECTIONS:
            print(f"\n{name}\n\n{markdown(name)}")
