"""What a notebook shows: from ``%%px`` cells on a real 2-engine cluster, output in rank
order, communicator errors as the message and the cell line, other errors in full; and
arrays of one value to the same four digits as longer ones."""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import numpy as np
import pytest

from dpnb.cluster import Cluster
from dpnb.notebook.inspect import summarize

TIMEOUT = 60
SETUP = """\
import numpy as np
import nnabla as nn
import nnabla.communicators as C
from nnabla.ext_utils import get_extension_context
comm = C.MultiProcessCommunicator(get_extension_context("cpu"))
comm.init()
"""


@pytest.fixture(scope="module")
def shell(ipython_dir):
    """An IPython shell with ``%%px`` on a 2-engine cluster, as a notebook has it."""
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    cluster = Cluster(2, timeout=TIMEOUT, progress=False)
    cluster.start()
    cluster.view.execute(SETUP, block=False).get(timeout=TIMEOUT)
    yield ip
    cluster.stop()


def test_px_output_in_rank_order(shell, capsys):
    """Rank 1 prints first; the cell still shows rank 0's output first."""
    result = shell.run_cell("%%px\nimport time\ntime.sleep(0.0 if rank else 1.0)\n"
                            "print('line from rank', rank)")
    assert result.success
    out = capsys.readouterr().out
    assert out.index("line from rank 0") < out.index("line from rank 1")
    assert "[stdout:0] \nline from rank 0\n[stdout:1] \nline from rank 1" in out


def test_mismatched_collective_shows_message_and_cell_line(shell, capsys, tmp_path):
    cell = ("%%px\nx = nn.NdArray.from_numpy_array(np.ones(3 + rank, np.float32))\n"
            "comm.all_reduce([x])")
    result = shell.run_cell(cell)
    assert not result.success
    err = capsys.readouterr()
    shown = err.out + err.err
    blocks = dict(re.findall(r"\[(\d):execute\]:?\n(.*?)(?=\n\[\d:execute\]|\Z)", shown,
                             flags=re.S))
    assert sorted(blocks) == ["0", "1"], shown
    for block in blocks.values():
        frames, message = block.split("AgreementError: ")
        assert frames.strip().splitlines() == ["Cell In[%s], line 2" % frames.split("[")[1]
                                               .split("]")[0], "----> comm.all_reduce([x])"]
        assert "rank 0: all_reduce(group='world', [float32[3]]" in message
        assert "rank 1: all_reduce(group='world', [float32[4]]" in message
    assert "dpnb/communicators" not in shown
    # a function of the user's own file called from the cell shows as a frame of its own
    (tmp_path / "user_step.py").write_text("def step(comm, x):\n    comm.all_reduce([x])\n")
    cell = (f"%%px\nimport sys; sys.path.insert(0, {str(tmp_path)!r})\nimport user_step\n"
            "user_step.step(comm, nn.NdArray.from_numpy_array(np.ones(3 + rank, np.float32)))")
    assert not shell.run_cell(cell).success
    shown = capsys.readouterr()
    frames = (shown.out + shown.err).split("[1:execute]")[1].split("AgreementError: ")[0]
    assert frames.strip().splitlines()[2:] == [   # after ":" and "Cell In[n], line 3"
        "----> user_step.step(comm, nn.NdArray.from_numpy_array(np.ones(3 + rank, np.float32)))",
        f"File {tmp_path / 'user_step.py'}:2, in step", "----> comm.all_reduce([x])"]
    # the communicator stays usable: the agreement check ran before any data moved
    assert shell.run_cell("%%px\ncomm.all_reduce([nn.NdArray.from_numpy_array("
                          "np.ones(2, np.float32))])").success


def test_other_errors_keep_full_traceback(shell, capsys):
    cell = "%%px\ndef inner():\n    return 1 / 0\ninner()"
    assert not shell.run_cell(cell).success
    err = capsys.readouterr()
    shown = re.sub(r"\x1b\[[0-9;]*m", "", err.out + err.err)  # IPython's colours
    for rank in (0, 1):
        block = shown.split(f"[{rank}:execute]")[1]
        assert "Traceback (most recent call last)" in block
        assert "----> 3 inner()" in block and "----> 2     return 1 / 0" in block
        assert "ZeroDivisionError: division by zero" in block


def test_single_values_to_four_digits():
    assert summarize(np.array(3.5974698066711426, np.float32)) == "float32() [3.5975]"
    assert summarize(np.array([0.000695423])) == "float64(1,) [0.0007]"
    assert summarize(np.zeros(0, np.int64)) == "int64(0,) []"
    assert summarize(np.array([3.5974698, 1.0])).endswith("[3.5975, 1.    ]")


def test_cluster_files_owner_only_and_removed_at_stop(shell):
    """The cluster file is the owner's while the cluster runs; at stop, no file of it is
    left in the profile, the controller's engine table in its log folder included."""
    c = Cluster(2, timeout=TIMEOUT, progress=False, cluster_id="display-files")
    c.start()
    profile = Path(c.ipp.profile_dir)
    try:
        assert stat.S_IMODE(os.stat(c.ipp.cluster_file).st_mode) == 0o600
        assert (profile / "log" / "enginesdisplay-files.json").exists()
    finally:
        c.stop()
    left = [p.name for p in (profile / "log").iterdir()] + \
        [p.name for p in (profile / "security").iterdir()]
    assert not [name for name in left if "display-files" in name], left


def test_headers_in_the_chosen_language():
    import dpnb
    from dpnb.notebook.table import Table
    from dpnb.errors import DpnbError

    table = Table(["rank", "norm rank 1", "max |diff|", "unlisted"], [[0, "1.5", "0", "x"]])
    assert str(table).splitlines()[0] == "rank  norm rank 1  max |diff|  unlisted"
    try:
        dpnb.set_language("ja")
        lines = str(table).splitlines()
        assert lines[0] == "ランク  ノルム（ランク 1）  最大 |差|  unlisted"
        # wide characters take two columns, so values line up under their headers
        assert lines[1] == "------  ------------------  ---------  --------"
        assert lines[2] == "0       1.5                 0          x"
        assert "<th>ランク</th><th>ノルム（ランク 1）</th>" in table._repr_html_()
    finally:
        dpnb.set_language("en")
    assert "<th>rank</th>" in table._repr_html_()
    with pytest.raises(DpnbError, match="'en', 'ja'"):
        dpnb.set_language("fr")
