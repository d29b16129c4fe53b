"""The docs' table of nnabla's names (docs/nnabla.md) is what scripts/nnabla_names.py
computes now."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "nnabla_names.py"


def test_docs_table_is_current():
    printed = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                             timeout=60, check=True).stdout.strip("\n")
    text = (REPO / "docs" / "nnabla.md").read_text()
    start, end = "<!-- nnabla-names:start -->", "<!-- nnabla-names:end -->"
    in_docs = text[text.index(start) + len(start):text.index(end)].strip("\n")
    assert in_docs == printed, "run `python scripts/nnabla_names.py --write`"
    assert "| `nnabla.monitor` | 8 of 8 | none |" in printed
