"""The nnabla program tests/nnabla_programs/toolkit.py, unchanged, through ``dpnb run``,
against what nnabla 1.39 computed for it (tests/fixtures/nnabla/toolkit.json and .npz,
recorded by record_toolkit.py): an image data set through a CSV iterator, a Module
trained with a scheduler, hooks, recomputation and buffer clearing, a frozen GAN
intermediate, packed sequences through an LSTM, pprint, a saved and reloaded .nnp
network and solver states."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from dpnb.testing import ONE_THREAD

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "nnabla_programs" / "toolkit.py"
FIXTURES = HERE / "fixtures" / "nnabla"
DPNB = os.path.join(os.path.dirname(sys.executable), "dpnb")
NUMBER = re.compile(r"-?\d+\.\d*(?:e[-+]?\d+)?")


def test_toolkit_program_computes_what_nnabla_computes(tmp_path):
    result = subprocess.run([DPNB, "run", str(PROGRAM), "--result", str(tmp_path)],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env=dict(os.environ, **ONE_THREAD))
    assert result.returncode == 0, result.stdout + result.stderr
    ours = json.loads((tmp_path / "result.json").read_text())
    theirs = json.loads((FIXTURES / "toolkit.json").read_text())
    for key in ("hook_calls", "function_counts", "parameters", "iterator", "version_is_text"):
        assert ours[key] == theirs[key], key
    np.testing.assert_allclose(ours["losses"], theirs["losses"], rtol=1e-3, atol=1e-5)
    # nnabla keeps the learning rate in float32; dpnb returns the Python float it was given.
    np.testing.assert_allclose(ours["rates"], theirs["rates"], rtol=1e-7)
    assert NUMBER.sub("#", ours["pprint"]) == NUMBER.sub("#", theirs["pprint"])
    np.testing.assert_allclose([float(v) for v in NUMBER.findall(ours["pprint"])],
                               [float(v) for v in NUMBER.findall(theirs["pprint"])], rtol=1e-6)

    with np.load(tmp_path / "arrays.npz") as got, np.load(FIXTURES / "toolkit.npz") as expected:
        assert sorted(got) == sorted(expected)
        for name in expected:
            mine, recorded = got[name], expected[name]
            assert mine.dtype == recorded.dtype and mine.shape == recorded.shape, name
            if name == "resized":  # Pillow's bilinear filter, rounded to uint8
                assert np.abs(mine.astype(np.int16) - recorded).max() <= 1
            elif mine.dtype.kind in "iu" or name.startswith("csv/"):
                np.testing.assert_array_equal(mine, recorded, err_msg=name)
            else:
                np.testing.assert_allclose(mine, recorded, rtol=1e-3, atol=1e-5, err_msg=name)
        for loaded in ("out/load", "out/nnp_graph"):
            np.testing.assert_allclose(got[loaded], got["out/here"], rtol=1e-6, atol=1e-7)
        assert not got["gan/gen/affine/W"].any() and got["gan/dis/affine/W"].all()
