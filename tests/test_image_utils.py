"""dpnb.utils.image_utils against nnabla 1.39's Pillow back end (reads, resizes,
saves and their errors, recorded in tests/fixtures/nnabla/image_utils.json by
record_image_utils.py), and its behaviour without Pillow."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from PIL import __version__ as PIL_VERSION

from dpnb.errors import DpnbError
from dpnb.utils import image_utils as iu
from nnabla_cases import image_utils as cases

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "nnabla" / "image_utils.json")
                     .read_text())
INTERPOLATIONS = ("nearest", "box", "bilinear", "bicubic", "hamming", "lanczos")


def assert_same(got, want, name, values=True):
    """Equal outcomes (an error class, or an array's shape, dtype and values)."""
    if isinstance(want, str) or isinstance(got, str):
        assert got == want, name
        return
    assert (got["shape"], got["dtype"]) == (want["shape"], want["dtype"]), name
    if values:
        np.testing.assert_allclose(np.array(got["values"], dtype=np.float64),
                                   np.array(want["values"], dtype=np.float64),
                                   rtol=1e-6, err_msg=name)


def test_imread_matches_nnabla(tmp_path):
    got = cases.read_cases(iu, cases.write_images(str(tmp_path)))
    assert got.keys() == FIXTURE["read"].keys()
    for name, want in FIXTURE["read"].items():
        assert_same(got[name], want, name)


def test_imresize_matches_nnabla():
    got = cases.resize_cases(iu, INTERPOLATIONS)
    assert got.keys() == FIXTURE["resize"].keys()
    for name, want in FIXTURE["resize"].items():
        # Pillow's versions resample uint8 images with these filters differently (by up to
        # 5 levels from 12.3 to 13.0): their values are checked against Pillow below.
        varies = name.startswith("u8") and "-nearest-" not in name and "-box-" not in name
        if name.startswith("u16") and not isinstance(want, str):
            # Where bicubic and lanczos overshoot the uint16 range, nnabla's cast wraps
            # around (-3 becomes 65533); dpnb clips to 0 and 65535: compare the rest.
            kept = [0 < v < 65535 for v in got[name]["values"]]
            got[name]["values"] = [v for v, k in zip(got[name]["values"], kept) if k]
            want = {**want, "values": [v for v, k in zip(want["values"], kept) if k]}
        assert_same(got[name], want, name, values=not varies or FIXTURE["pillow"] == PIL_VERSION)


@pytest.mark.parametrize("how", INTERPOLATIONS)
def test_uint8_images_resize_as_pillow_images(how):
    for name, img in cases.resize_images().items():
        if img.dtype != np.uint8 or img.shape[:2] == (1, 1):
            continue
        plane = img[..., 0] if img.ndim == 3 and img.shape[2] == 1 else img
        want = np.asarray(Image.fromarray(plane).resize((9, 4), getattr(Image.Resampling,
                                                                         how.upper())))
        got = iu.imresize(img, (9, 4), interpolate=how)
        np.testing.assert_array_equal(got.reshape(want.shape), want, err_msg=name)
        assert got.shape == want.shape[:2] + img.shape[2:]


def test_imsave_matches_nnabla(tmp_path):
    got = cases.save_cases(iu, str(tmp_path))
    assert got.keys() == FIXTURE["save"].keys()
    for name, want in FIXTURE["save"].items():
        assert_same(got[name], want, name)


def test_minmax_auto_scale_matches_nnabla():
    for name, want in FIXTURE["minmax"].items():
        assert_same(cases.minmax_cases(iu)[name], want, name)


def test_float_image_saves_as_its_values_times_255(tmp_path):
    img = np.random.RandomState(0).rand(4, 5, 3)
    iu.imwrite(str(tmp_path / "a.png"), img)
    np.testing.assert_array_equal(iu.imload(str(tmp_path / "a.png")),
                                  (img.astype(np.float32) * 255).astype(np.uint8))


def test_errors_say_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="as_uint16=False"):
        iu.imsave(str(tmp_path / "a.png"), np.zeros((2, 2), np.uint16))
    with pytest.raises(ValueError, match="grayscale=True"):
        iu.imread(str(tmp_path / "a.png"), num_channels=1)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        iu.imsave(str(tmp_path / "a.png"), np.full((2, 2), 2.0))
    with pytest.raises(ValueError, match="dpnb has only 'PilBackend'"):
        iu.set_backend("Cv2Backend")


def test_the_backend_is_pillow():
    iu.set_backend("PilBackend")
    assert iu.get_backend() == "PilBackend"
    assert iu.get_available_backends() == ["PilBackend"]


def test_without_pillow_the_import_works_and_a_call_says_to_install_it():
    script = ("import sys; sys.modules['PIL'] = None\n"
              "import numpy as np\n"
              "from dpnb.utils import image_utils as iu\n"
              "assert iu.get_available_backends() == [] and iu.get_backend() == ''\n"
              "try:\n"
              "    iu.imresize(np.zeros((2, 2), np.uint8), (3, 3))\n"
              "except iu.DpnbError as e:\n"
              "    print(e)\n")
    script = script.replace("iu.DpnbError", "__import__('dpnb.errors').errors.DpnbError")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "pip install pillow" in done.stdout


def test_dpnb_error_is_raised_for_a_missing_pillow(monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(DpnbError, match="pip install pillow"):
        iu.imread("x.png")
