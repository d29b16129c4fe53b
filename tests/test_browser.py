"""The tutorials and the cluster workflow in a real JupyterLab, driven in headless Chromium
by Playwright: what a person sees in the page (outputs, errors, tables, plots, progress)."""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from browser import steps
from browser.lab import Lab, copy_notebooks, find_chromium
from playwright import sync_api

REPO = Path(__file__).resolve().parent.parent
TUTORIALS = ["01_data_parallel_training.ipynb", "01_data_parallel_training.ja.ipynb"]
RANK_COLOURS = {0: (0x1F, 0x77, 0xB4), 1: (0xFF, 0x7F, 0x0E)}  # matplotlib's C0, C1
ARTIFACTS = REPO / "tests" / "artifacts" / "browser"

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium at /usr/bin/chromium (apt-get install -y chromium) "
                             "or $DPNB_CHROMIUM: the browser tests drive the system Chromium")


@pytest.fixture(scope="module")
def lab(tmp_path_factory, ipython_dir):
    from dpnb.cluster.profile import install

    install(str(ipython_dir), force=True)
    root = tmp_path_factory.mktemp("lab-root")
    copy_notebooks(TUTORIALS, REPO / "dpnb" / "tutorials", root)
    home = tmp_path_factory.mktemp("lab-home")
    server = Lab(root, home, ipython_dir, log=home / "jupyter-lab.log")
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, request):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.shots = steps.Shots(page, ARTIFACTS / request.node.name.replace("[", "-").rstrip("]"))
    yield page
    page.shots("end")
    context.close()


def stop_leftover_clusters(ipython_dir: Path, profile: str) -> None:
    """Stop every cluster of a profile that the panel or a notebook started and a failed
    test left running."""
    from dpnb.cluster.elsewhere import stop_cluster

    profile_dir = ipython_dir / f"profile_{profile}"
    for path in (profile_dir / "security").glob("cluster-*.json"):
        stop_cluster(profile_dir=str(profile_dir), cluster_id=path.stem[len("cluster-"):])


def stored_outputs(name: str):
    """Per code cell of the committed notebook: the output kinds it shows there."""
    nb = json.loads((REPO / "dpnb" / "tutorials" / name).read_text())
    kinds = {}
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            kinds[i] = {m for o in cell["outputs"] for m in o.get("data", {})} | {
                o.get("name", o["output_type"]) for o in cell["outputs"]}
    return nb, kinds


@pytest.mark.parametrize("name", TUTORIALS)
def test_tutorial_restart_and_run_all(lab, page, name):
    nb, kinds = stored_outputs(name)
    opening = time.monotonic()
    steps.open_notebook(page, lab, name, workspace=name.replace(".", "-"))
    page.shots("opened")
    steps.menu(page, "Edit", "Clear Outputs of All Cells")
    assert not any(steps.DONE_PROMPT.match(p) for p in steps.prompts(page))
    start = time.monotonic()
    steps.menu(page, "Kernel", "Restart Kernel and Run All Cells")
    steps.accept_dialog(page, "Restart Kernel?")
    waited = steps.wait_all_run(page, sorted(kinds), timeout=240)
    page.shots("run_all_done")
    done = time.monotonic()
    print(f"{name}: restart and run all {done - start:.1f} s (cells {waited:.1f} s); from "
          f"opening it to the last cell done {done - opening:.1f} s (clearing outputs included)")
    assert steps.errors(page) == {}
    training = next(i for i, c in enumerate(nb["cells"]) if "report(step" in "".join(c["source"]))
    bars = steps.progress_bars(page, training, until="100/100")
    assert len(bars) == 1 and "100/100" in bars[0], f"training cell: progress {bars}"
    curve = steps.images(page, training)
    assert len(curve) == 1, f"training cell: {len(curve)} loss curves"
    for rank, rgb in RANK_COLOURS.items():
        assert steps.color_pixels(curve[0], rgb) > 100, f"live curve: no line of rank {rank}"
    for i in sorted(kinds.keys() - {training}):
        cell = steps.cells(page).nth(i)
        if "text/html" in kinds[i]:
            assert cell.locator(".jp-OutputArea-output table").count() >= 1, f"cell {i}: no HTML table"
        if "image/png" in kinds[i]:
            assert steps.images(page, i), f"cell {i}: no image"
    plot_cell = next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
                     and "".join(c["source"]).startswith("from dpnb.notebook import plot_losses"))
    png = steps.images(page, plot_cell)[0]
    for rank, rgb in RANK_COLOURS.items():
        assert steps.color_pixels(png, rgb) > 100, f"plot_losses: no line of rank {rank}"
    resumed = next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
                   and "".join(c["source"]).startswith("resumed = dpnb.gather"))
    shown = steps.cells(page).nth(resumed).locator(".jp-OutputArea").inner_text()
    assert shown.splitlines()[0].endswith(": True"), f"resumed parameters differ: {shown}"


def test_clusters_panel_start_attach_px_stop(lab, page):
    steps.write_notebook(lab.root / "clusters.ipynb", [
        'import dpnb\n\ncluster = dpnb.Cluster.attach("mpi", timeout=90)\nsorted(cluster.client.ids)',
        "%%px\nfrom mpi4py import MPI\n\nprint(f\"rank {MPI.COMM_WORLD.rank} of {MPI.COMM_WORLD.size}\")",
        "%%px\nprint(rank)",
    ])
    steps.open_notebook(page, lab, "clusters.ipynb", workspace="clusters")
    page.locator(".jp-SideBar .lm-TabBar-tab[data-id='ipp-cluster-launcher']").click()
    item = page.locator(".ipp-ClusterListingItem[data-cluster-id='mpi:']")
    item.wait_for(timeout=30_000)
    assert "State: Stopped" in item.inner_text()
    page.shots("panel_lists_mpi")
    item.locator(".ipp-ClusterListingItem-start").click()
    try:
        started = time.monotonic()
        item.filter(has_text="State: Running").wait_for(timeout=60_000)
        steps.run_cell(page, 0)            # attach at once: it waits for the engines
        steps.wait_cell_done(page, 0, timeout=120)
        attach_s = time.monotonic() - started
        page.shots("attached")
        assert steps.errors(page) == {}
        assert steps.output_text(page, 0).strip().endswith("[0, 1]")
        steps.run_cell(page, 1)
        steps.wait_cell_done(page, 1, timeout=60)
        page.shots("px_on_two_ranks")
        assert steps.errors(page) == {}
        shown = steps.output_text(page, 1)
        assert "rank 0 of 2" in shown and "rank 1 of 2" in shown, shown
        assert shown.index("rank 0 of 2") < shown.index("rank 1 of 2"), f"not in rank order: {shown}"
        item.locator(".ipp-ClusterListingItem-stop").click()
        stopped = time.monotonic()
        page.locator(".ipp-ClusterListingItem[data-cluster-id='mpi:']", has_text="State: Stopped").wait_for(
            timeout=60_000)
        stop_s = time.monotonic() - stopped
        steps.run_cell(page, 2)
        error_s = steps.wait_cell_done(page, 2, timeout=30)
        page.shots("px_after_stop")
        told = steps.errors(page).get(2, "")
        assert told.startswith("ClusterGone: the controller") and "cluster.restart()" in told, told
        assert "Traceback" not in told and len(told.splitlines()) == 1, told
    finally:
        stop_leftover_clusters(lab.ipython_dir, "mpi")
    page.shots("stopped")
    print(f"panel START to a usable attach: {attach_s:.1f} s; STOP to the panel's Stopped "
          f"{stop_s:.1f} s, then the next cell's error {error_s:.1f} s")


FAULT_CELLS = [
    "import dpnb\n\ncluster = dpnb.start(n=2, timeout=120)",
    "%%px\nimport time\n\nimport numpy as np\n\nimport dpnb as nn\nimport dpnb.communicators as C\n"
    "from dpnb.notebook import report\n\ncomm = C.MultiProcessCommunicator(nn.Context())\n"
    "comm.init()\nx = [np.ones(10, np.float32)]",
    "%%px\nif rank == 0:\n    comm.all_reduce(x)  # rank 1 never calls it\nelse:\n    time.sleep(120)",
    "%%px\ncomm.all_reduce(x)",
    "cluster.restart()",
    "%%px\nimport time\n\nfrom dpnb.notebook import report\n\n"
    "for step in range(1, 601):\n    time.sleep(0.1)\n    report(step, 600)",
    "cluster.restart()",
    "%%px\nprint(f\"rank {rank} of {size}\")",
]


def engine_pid(ipython_dir: Path, rank: int) -> int:
    """The pid of the dpnb engine of ``rank`` whose cluster lives under ``ipython_dir``."""
    import psutil

    for p in psutil.process_iter(["cmdline", "environ"]):
        env = p.info["environ"] or {}
        if ("dpnb.cluster.engine" in " ".join(p.info["cmdline"] or [])
                and env.get("PMI_RANK") == str(rank)       # set by MPICH's mpiexec
                and env.get("IPP_PROFILE_DIR", "").startswith(str(ipython_dir))):
            return p.pid
    raise AssertionError(f"no engine of rank {rank} under {ipython_dir}")


def test_interrupt_in_a_collective_and_an_engine_killed_mid_loop(lab, page):
    steps.write_notebook(lab.root / "faults.ipynb", FAULT_CELLS)
    steps.open_notebook(page, lab, "faults.ipynb", workspace="faults")
    for i in (0, 1):
        steps.run_cell(page, i)
        steps.wait_cell_done(page, i, timeout=120)
    assert steps.errors(page) == {}
    try:
        # Interrupt a rank waiting in a collective its peer never calls
        steps.run_cell(page, 2)
        steps.wait_cell_running(page, 2)
        time.sleep(2.0)
        steps.menu(page, "Kernel", "Interrupt Kernel")
        interrupted = time.monotonic()
        steps.wait_cell_done(page, 2, timeout=30)
        interrupt_s = time.monotonic() - interrupted
        page.shots("interrupted")
        told = steps.errors(page).get(2, "")
        assert "[rank 0] CommunicatorInterrupted: all_reduce" in told, told
        assert "[rank 1] KeyboardInterrupt" in told, told
        # the next collective fails at once, naming the interrupted rank
        steps.run_cell(page, 3)
        next_s = steps.wait_cell_done(page, 3, timeout=30)
        page.shots("next_collective")
        told = steps.errors(page).get(3, "")
        assert "rank 0 was interrupted in all_reduce" in told and "restart" in told, told
        assert next_s < 10, f"the next collective took {next_s:.1f} s"
        steps.run_cell(page, 4)
        steps.wait_cell_done(page, 4, timeout=120)

        # an engine killed while a loop reports its progress
        steps.run_cell(page, 5)
        steps.wait_cell_running(page, 5)
        steps.cells(page).nth(5).locator(".widget-hprogress").wait_for(timeout=30_000)
        page.shots("loop_running")
        os.kill(engine_pid(lab.ipython_dir, 1), signal.SIGKILL)
        killed = time.monotonic()
        steps.wait_cell_done(page, 5, timeout=60)
        death_s = time.monotonic() - killed
        page.shots("engine_killed")
        told = steps.errors(page).get(5, "")
        assert "EngineError" in told and "cluster.restart(resume=True)" in told, told
        assert steps.progress_bars(page, 5), "the loop's progress bar is gone"
        steps.run_cell(page, 6)
        steps.wait_cell_done(page, 6, timeout=120)
        steps.run_cell(page, 7)
        steps.wait_cell_done(page, 7, timeout=60)
        page.shots("restarted")
        assert set(steps.errors(page)) == {2, 3, 5}, steps.errors(page)
        shown = steps.output_text(page, 7)
        assert "rank 0 of 2" in shown and "rank 1 of 2" in shown, shown
    finally:
        stop_leftover_clusters(lab.ipython_dir, "default")
    print(f"Interrupt to the prompt: {interrupt_s:.1f} s; the next collective's error: "
          f"{next_s:.1f} s; an engine killed to the cell's error: {death_s:.1f} s")
