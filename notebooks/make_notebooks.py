"""Write the notebooks from their cells (tutorial_cells.py holds English and
Japanese side by side; cifar10_cells.py the CIFAR-10 notebook), then execute
them so their stored outputs are what nbval compares against.  They are written into the
package (``dpnb/tutorials``), which ``dpnb notebooks DIR`` copies them out of.

    python notebooks/make_notebooks.py [NAME ...]   (default: all of them)
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
TUTORIALS = HERE.parent / "dpnb" / "tutorials"
sys.path.insert(0, str(HERE))
import cifar10_cells  # noqa: E402
import tutorial_cells  # noqa: E402


def tutorial(lang: str) -> list[tuple]:
    """The tutorial's (kind, text, [tags]) cells in one language."""
    return [(kind, ja if lang == "ja" and ja is not None else en, *tags)
            for kind, en, ja, *tags in tutorial_cells.CELLS]


NOTEBOOKS = {"01_data_parallel_training.ipynb": tutorial("en"),
             "01_data_parallel_training.ja.ipynb": tutorial("ja"),
             "02_cifar10_data_parallel.ipynb": cifar10_cells.CELLS}


def build(cells: list[tuple]) -> nbformat.NotebookNode:
    nb_cells = []
    for kind, text, *tags in cells:
        text = text.strip("\n")
        cell = new_markdown_cell(text) if kind == "md" else new_code_cell(text)
        if tags:
            cell.metadata["tags"] = tags[0]
        nb_cells.append(cell)
    nb = new_notebook(cells=nb_cells)
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python",
                                 "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def execute(nb: nbformat.NotebookNode) -> None:
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(TUTORIALS)}}).execute()
    for cell in nb.cells:
        cell.metadata.pop("execution", None)


if __name__ == "__main__":
    unknown = set(sys.argv[1:]) - set(NOTEBOOKS)
    if unknown:
        sys.exit(f"make_notebooks: no notebook named {', '.join(sorted(unknown))}; "
                 f"expected some of {', '.join(NOTEBOOKS)}")
    for name in sys.argv[1:] or NOTEBOOKS:
        nb = build(NOTEBOOKS[name])
        execute(nb)
        nbformat.write(nb, TUTORIALS / name)
        print(f"wrote {TUTORIALS / name}")
