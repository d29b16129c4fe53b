"""What a person does in JupyterLab, as Playwright steps, and what the tests read back
from the page: cells, their prompts and outputs (JupyterLab 4's DOM)."""
from __future__ import annotations

import base64
import io
import re
import time
from pathlib import Path

ERROR = '[data-mime-type="application/vnd.jupyter.error"]'
STDERR = '[data-mime-type="application/vnd.jupyter.stderr"]'
DONE_PROMPT = re.compile(r"^\[\d+\]:$")


class Shots:
    """Numbered screenshots of each step, in the artifacts folder."""

    def __init__(self, page, folder: Path):
        self.page, self.folder, self.n = page, folder, 0
        folder.mkdir(parents=True, exist_ok=True)

    def __call__(self, name: str) -> Path:
        self.n += 1
        path = self.folder / f"{self.n:02d}_{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


def open_notebook(page, lab, name: str, workspace: str) -> None:
    """Open a notebook in a workspace of its own (no tabs restored from an earlier test),
    and wait until JupyterLab has restored its layout and the notebook's kernel is idle.
    Acting earlier failed on a loaded machine: a "Select Kernel" dialog took the clicks,
    and a run of every cell once looked done in 0.8 s, with the file's stored outputs."""
    page.goto(lab.url(f"lab/workspaces/{workspace}/tree/{name}"))
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=60_000)
    page.evaluate("() => window.jupyterapp.restored.then(() => true)")
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=60_000)
    # Where the kernel specs come late (a loaded machine), JupyterLab asks which kernel to
    # start, with the notebook's own selected: a person clicks Select.
    asked = page.locator(".jp-Dialog", has=page.locator(".jp-Dialog-header",
                                                         has_text="Select Kernel"))
    deadline = time.monotonic() + 60
    while page.evaluate(_KERNEL_STATUS) != "idle":
        if asked.count():
            accept_dialog(page, "Select Kernel")
        if time.monotonic() > deadline:
            raise AssertionError(f"the kernel of {name} was not idle 60 s after opening it")
        time.sleep(0.2)


# The status of the current notebook's kernel, null while it has none.
_KERNEL_STATUS = """() => {
    const widget = window.jupyterapp.shell.currentWidget;
    const kernel = widget && widget.sessionContext && widget.sessionContext.session
        && widget.sessionContext.session.kernel;
    return kernel ? kernel.status : null;
}"""


def wait_kernel_idle(page, timeout: float = 60) -> None:
    """The toolbar's kernel status says Idle."""
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator"
                 "[data-status='idle']").first.wait_for(timeout=timeout * 1000)


def menu(page, *labels: str) -> None:
    """Click through the main menu: menu(page, "Kernel", "Interrupt Kernel")."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{re.escape(labels[0])}$")).click()
    for label in labels[1:]:
        page.locator(".lm-Menu:not(.lm-mod-hidden) .lm-Menu-itemLabel",
                     has_text=re.compile(f"^{re.escape(label)}")).first.click()


def accept_dialog(page, title: str, timeout: float = 10) -> None:
    """Accept the dialog titled ``title``; another dialog in its place is an error that
    says what it asked."""
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=timeout * 1000)
    shown = dialog.locator(".jp-Dialog-header").inner_text().strip()
    if shown != title:
        raise AssertionError(f"expected the dialog {title!r}, JupyterLab shows {shown!r}: "
                             f"{dialog.locator('.jp-Dialog-body').inner_text()[:300]}")
    dialog.locator(".jp-Dialog-button.jp-mod-accept").click(timeout=timeout * 1000)
    dialog.wait_for(state="detached", timeout=timeout * 1000)


def cells(page):
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell")


def prompts(page) -> list[str]:
    """The input prompt of each cell ('' for markdown cells), in notebook order."""
    return page.evaluate("""() => Array.from(document.querySelectorAll(
        '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell')).map(c => {
            const p = c.querySelector('.jp-InputPrompt');
            return c.classList.contains('jp-CodeCell') && p ? p.textContent.trim() : '';
        })""")


def wait_all_run(page, code_cells: list[int], timeout: float) -> float:
    """Wait until each of ``code_cells`` shows an execution count and the kernel is idle;
    returns the seconds waited."""
    start = time.monotonic()
    while True:
        shown = prompts(page)
        if all(DONE_PROMPT.match(shown[i]) for i in code_cells):
            wait_kernel_idle(page, timeout=max(1, timeout - (time.monotonic() - start)))
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"cells not run after {timeout} s: "
                                 f"{[(i, shown[i]) for i in code_cells if not DONE_PROMPT.match(shown[i])]}")
        time.sleep(0.25)


def errors(page) -> dict[int, str]:
    """Cell index -> text of the error and stderr outputs it shows (JupyterLab renders
    a traceback with the stderr MIME type)."""
    found = {}
    for i in range(cells(page).count()):
        errs = cells(page).nth(i).locator(", ".join(
            f".jp-OutputArea-output{kind}, .jp-OutputArea-output {kind}" for kind in (ERROR, STDERR)))
        if errs.count():
            found[i] = "\n".join(errs.all_inner_texts())
    return found


def images(page, index: int) -> list[bytes]:
    """The PNG images shown in a cell's outputs."""
    sources = cells(page).nth(index).locator(".jp-OutputArea-output img").evaluate_all(
        "imgs => imgs.map(i => i.src)")
    return [base64.b64decode(s.split(",", 1)[1]) for s in sources if s.startswith("data:image/png")]


def color_pixels(png: bytes, rgb: tuple[int, int, int], tolerance: int = 40) -> int:
    """How many pixels of a PNG are close to ``rgb`` (a line's colour)."""
    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    return int((np.abs(pixels - np.array(rgb)).max(axis=-1) <= tolerance).sum())


def run_cell(page, index: int, tries: int = 3) -> None:
    """Select cell ``index`` and run it with Shift+Enter, as a person does; pressed again
    where the cell does not take it (its prompt stays ``[ ]:`` for 5 s, as seen once in
    a full run: the keys went to the page before the cell had the focus)."""
    prompt = cells(page).nth(index).locator(".jp-InputPrompt")
    for _ in range(tries):
        cells(page).nth(index).locator(".jp-InputArea-editor").click()
        page.keyboard.press("Shift+Enter")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if prompt.inner_text().strip() != "[ ]:":
                return
            time.sleep(0.1)
    raise AssertionError(f"cell {index} did not start after {tries} Shift+Enter presses")


def wait_cell_running(page, index: int, timeout: float = 30) -> None:
    """Wait until cell ``index`` shows the running prompt ``[*]:``."""
    cells(page).nth(index).locator(".jp-InputPrompt", has_text="[*]").wait_for(
        timeout=timeout * 1000)


def output_text(page, index: int) -> str:
    """The text of cell ``index``'s outputs."""
    return cells(page).nth(index).locator(".jp-OutputArea").inner_text()


def progress_bars(page, index: int, until: str = "", timeout: float = 15) -> list[str]:
    """The text beside each progress bar widget (tqdm's) in cell ``index``'s outputs; with
    ``until``, once a bar shows that text or ``timeout`` s have passed (widgets render after
    their comm messages, which a loaded machine may deliver after the kernel went idle)."""
    deadline = time.monotonic() + timeout
    while True:
        bars = cells(page).nth(index).locator(
            ".jp-OutputArea-output .widget-hbox:has(.widget-hprogress)").all_inner_texts()
        if not until or any(until in bar for bar in bars) or time.monotonic() > deadline:
            return bars
        time.sleep(0.25)


def wait_cell_done(page, index: int, timeout: float) -> float:
    """Wait until cell ``index`` shows an execution count; returns the seconds waited."""
    start = time.monotonic()
    prompt = cells(page).nth(index).locator(".jp-InputPrompt")
    while not DONE_PROMPT.match(prompt.inner_text().strip()):
        if time.monotonic() - start > timeout:
            raise AssertionError(f"cell {index} not done after {timeout} s")
        time.sleep(0.1)
    return time.monotonic() - start


def write_notebook(path: Path, sources: list[str]) -> None:
    """A notebook of code cells with these sources, for the Python 3 kernel."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    nbformat.write(nb, str(path))
