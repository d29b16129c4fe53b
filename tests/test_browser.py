"""The tutorials and the cluster workflow in a real JupyterLab, driven in headless Chromium
by Playwright: what a person sees in the page (outputs, errors, tables, plots, progress)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from playwright import sync_api

from browser import steps
from browser.lab import Lab, copy_notebooks, find_chromium

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
    copy_notebooks(TUTORIALS, REPO / "notebooks", root)
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


def stored_outputs(name: str):
    """Per code cell of the committed notebook: the output kinds it shows there."""
    nb = json.loads((REPO / "notebooks" / name).read_text())
    kinds = {}
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            kinds[i] = {m for o in cell["outputs"] for m in o.get("data", {})} | {
                o.get("name", o["output_type"]) for o in cell["outputs"]}
    return nb, kinds


@pytest.mark.parametrize("name", TUTORIALS)
def test_tutorial_restart_and_run_all(lab, page, name):
    nb, kinds = stored_outputs(name)
    steps.open_notebook(page, lab, name, workspace=name.replace(".", "-"))
    page.shots("opened")
    steps.menu(page, "Edit", "Clear Outputs of All Cells")
    assert not any(steps.DONE_PROMPT.match(p) for p in steps.prompts(page))
    start = time.monotonic()
    steps.menu(page, "Kernel", "Restart Kernel and Run All Cells")
    steps.accept_dialog(page)
    waited = steps.wait_all_run(page, sorted(kinds), timeout=240)
    page.shots("run_all_done")
    print(f"{name}: restart and run all {time.monotonic() - start:.1f} s (cells {waited:.1f} s)")
    assert steps.errors(page) == {}
    progress_cell = next(i for i, c in enumerate(nb["cells"])
                         if c["cell_type"] == "code" and "report(step" in "".join(c["source"]))
    training = steps.cells(page).nth(progress_cell)
    for shown in (".widget-hprogress", ".jp-OutputArea-output img"):  # the final curve may trail
        training.locator(shown).first.wait_for(timeout=10_000)
    for i in sorted(kinds):
        cell = steps.cells(page).nth(i)
        if "text/html" in kinds[i]:
            assert cell.locator(".jp-OutputArea-output table").count() >= 1, f"cell {i}: no HTML table"
        if "image/png" in kinds[i]:
            assert steps.images(page, i), f"cell {i}: no image"
        stderr = cell.locator(f".jp-OutputArea-output{steps.STDERR}").all_inner_texts()
        if i != progress_cell:
            assert stderr == [], f"cell {i} wrote to stderr: {stderr}"
    cell = steps.cells(page).nth(progress_cell)
    cell.screenshot(path=str(page.shots.folder / "progress_cell.png"))
    bars = [i for i in range(steps.cells(page).count())
            if steps.cells(page).nth(i).locator(".widget-hprogress").count()]
    assert bars == [progress_cell], f"the progress bar is shown in cells {bars}"
    assert "100/100" in cell.locator(".jp-OutputArea").inner_text()
    assert cell.locator(".widget-hprogress").count() == 1
    curves = steps.images(page, progress_cell)
    assert len(curves) == 1, f"the training cell shows {len(curves)} loss curves"
    plot_cell = next(i for i, c in enumerate(nb["cells"])
                     if c["cell_type"] == "code" and "".join(c["source"]).startswith("from dpnb.notebook import plot_losses"))
    steps.save(page)
    saved = json.loads((lab.root / name).read_text())
    widgets = [i for i, c in enumerate(saved["cells"]) for o in c.get("outputs", [])
               if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert widgets == [progress_cell], f"saved: progress widgets in cells {widgets}"
    for where, png in (("live curve", curves[0]), ("plot_losses", steps.images(page, plot_cell)[0])):
        for rank, rgb in RANK_COLOURS.items():
            assert steps.color_pixels(png, rgb) > 100, f"{where}: no line of rank {rank}"
