"""Write both tutorial notebooks from the one list of cells in tutorial_cells.py,
then execute them so their stored outputs are what nbval compares against.

    python notebooks/make_notebooks.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from tutorial_cells import CELLS  # noqa: E402

NOTEBOOKS = {"en": HERE / "01_data_parallel_training.ipynb",
             "ja": HERE / "01_data_parallel_training.ja.ipynb"}


def build(lang: str) -> nbformat.NotebookNode:
    cells = []
    for kind, en, ja, *tags in CELLS:
        text = (ja if lang == "ja" and ja is not None else en).strip("\n")
        cell = new_markdown_cell(text) if kind == "md" else new_code_cell(text)
        if tags:
            cell.metadata["tags"] = tags[0]
        cells.append(cell)
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python",
                                 "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def execute(nb: nbformat.NotebookNode) -> None:
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(HERE)}}).execute()
    for cell in nb.cells:
        cell.metadata.pop("execution", None)


if __name__ == "__main__":
    for lang, path in NOTEBOOKS.items():
        nb = build(lang)
        execute(nb)
        nbformat.write(nb, path)
        print(f"wrote {path}")
