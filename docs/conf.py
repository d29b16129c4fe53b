"""Sphinx configuration of dpnb's documentation (``sphinx-build -W -b html docs docs/_build``).

Pages are Markdown (MyST) beside an API reference that autodoc and napoleon generate
from the package's numpydoc docstrings; the performance page's table is generated at
build time from ``benchmarks/results/*.json`` by ``_ext/benchmark_table.py``."""
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))        # the dpnb of this checkout
sys.path.insert(0, str(DOCS / "_ext"))

import dpnb  # noqa: E402

project = "dpnb"
author = "The dpnb developers"
copyright = "The dpnb developers, Apache-2.0"
release = dpnb.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.doctest",
    "benchmark_table",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3
myst_enable_extensions = ["dollarmath"]
smartquotes = False   # quotes stay as typed: names, commands and figures are searched as written

napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"   # no stub lists for undocumented arguments
# the optional packages some modules import (ipyparallel, mpi4py) are there in the test
# extra; nothing is mocked, so a reference that fails to import fails the build

html_theme = "alabaster"
html_title = f"dpnb {release}"
