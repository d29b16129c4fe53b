"""image_utils cases run with nnabla (record_image_utils.py records them into
image_utils.json) and with dpnb (test_image_utils.py compares): each takes the
library's ``image_utils`` module.  The image files are written with Pillow itself,
so that both libraries read the same bytes."""
import os

import numpy as np
from PIL import Image

R = np.random.RandomState


def _outcome(call):
    """The array a call returns (as shape, dtype and values), or the name of the
    builtin error class it raises (ValueError for nnabla's and dpnb's own)."""
    try:
        out = call()
    except ValueError:
        return "ValueError"
    return {"shape": list(out.shape), "dtype": out.dtype.name, "values": out.ravel().tolist()}


def write_images(tmp):
    """Small image files of each kind: gray, RGB, RGBA, two-channel, palette
    (with and without transparency), 1-bit, as PNG, and an RGB BMP."""
    rng = R(0)
    files = {}

    def save(name, image):
        files[name] = os.path.join(tmp, name)
        image.save(files[name])

    save("gray.png", Image.fromarray(rng.randint(0, 256, (5, 6)).astype(np.uint8)))
    save("rgb.png", Image.fromarray(rng.randint(0, 256, (5, 6, 3)).astype(np.uint8)))
    save("rgba.png", Image.fromarray(rng.randint(0, 256, (5, 6, 4)).astype(np.uint8)))
    save("la.png", Image.fromarray(rng.randint(0, 256, (5, 6, 2)).astype(np.uint8)))
    save("rgb.bmp", Image.fromarray(rng.randint(0, 256, (4, 3, 3)).astype(np.uint8)))
    palette = Image.new("P", (6, 5))
    palette.putpalette(rng.randint(0, 256, 4 * 3).astype(np.uint8).tolist())
    palette.putdata(rng.randint(0, 4, 30).tolist())
    save("palette.png", palette)
    palette.info["transparency"] = 2
    files["palette_t.png"] = os.path.join(tmp, "palette_t.png")
    palette.save(files["palette_t.png"], transparency=2)
    save("bits.png", Image.fromarray(rng.randint(0, 2, (5, 6)).astype(bool)))
    return files


def read_cases(iu, files):
    """imread of every file with each grayscale / num_channels / channel_first /
    palette setting, and with a nearest-neighbour resize."""
    cases = {}
    for name, path in sorted(files.items()):
        for gray in (False, True):
            for channels in (-1, 0, 1, 3, 4):
                for first in (False, True):
                    cases[f"{name}-{gray}-{channels}-{first}"] = _outcome(
                        lambda: iu.imread(path, grayscale=gray, num_channels=channels,
                                          channel_first=first))
        cases[f"{name}-indices"] = _outcome(lambda: iu.imread(path, return_palette_indices=True))
        cases[f"{name}-resized"] = _outcome(
            lambda: iu.imread(path, size=(4, 7), interpolate="nearest"))
        with open(path, "rb") as f:
            cases[f"{name}-file-object"] = _outcome(lambda: iu.imread(f))
    cases["as_uint16"] = _outcome(lambda: iu.imread(files["rgb.png"], as_uint16=True))
    return cases


def resize_images():
    """Inputs to imresize: uint8 (gray, one-, three- and five-channel, 1x1 RGB),
    float64 and uint16 images."""
    rng = R(1)
    return {
        "u8_gray": rng.randint(0, 256, (5, 7)).astype(np.uint8),
        "u8_c1": rng.randint(0, 256, (5, 7, 1)).astype(np.uint8),
        "u8_rgb": rng.randint(0, 256, (5, 7, 3)).astype(np.uint8),
        "u8_pixel": rng.randint(0, 256, (1, 1, 3)).astype(np.uint8),
        "f64_c2": rng.rand(6, 5, 2),
        "f64_gray": rng.rand(6, 5),
        "u16_rgb": rng.randint(0, 65536, (4, 6, 3)).astype(np.uint16),
    }


def resize_cases(iu, interpolations):
    """imresize of each input to (9, 4) (width, height), channels last and first."""
    cases = {}
    for name, img in resize_images().items():
        for how in interpolations:
            for first in (False, True):
                source = img.transpose(2, 0, 1) if first and img.ndim == 3 else img
                cases[f"{name}-{how}-{first}"] = _outcome(
                    lambda: iu.imresize(source, (9, 4), interpolate=how, channel_first=first))
    cases["unknown_interpolation"] = _outcome(
        lambda: iu.imresize(resize_images()["u8_rgb"], (3, 3), interpolate="area"))
    cases["size_not_a_tuple"] = _outcome(lambda: iu.imresize(resize_images()["u8_rgb"], 3))
    return cases


def save_cases(iu, tmp):
    """imsave of uint8, float and uint16 images with each option, read back with
    Pillow itself."""
    rng = R(2)
    images = {
        "u8_rgb": rng.randint(0, 256, (5, 6, 3)).astype(np.uint8),
        "u8_gray": rng.randint(0, 256, (5, 6)).astype(np.uint8),
        "u8_c1": rng.randint(0, 256, (5, 6, 1)).astype(np.uint8),
        "f64_rgb": rng.rand(5, 6, 3),
        "f32_gray": rng.rand(5, 6).astype(np.float32),
        "f64_out_of_range": rng.rand(5, 6, 3) * 2,
        "u16_rgb": rng.randint(0, 65536, (5, 6, 3)).astype(np.uint16),
        "u8_c5": rng.randint(0, 256, (5, 6, 5)).astype(np.uint8),
        "u8_4d": rng.randint(0, 256, (2, 5, 6, 3)).astype(np.uint8),
    }
    cases = {}
    for name, img in images.items():
        for auto_scale in (True, False):
            for as_uint16 in (False, True):
                for first in (False, True):
                    path = os.path.join(tmp, f"{name}-{auto_scale}-{as_uint16}-{first}.png")
                    source = img.transpose(2, 0, 1) if first and img.ndim == 3 else img

                    def save_and_read():
                        iu.imsave(path, source, channel_first=first, as_uint16=as_uint16,
                                  auto_scale=auto_scale)
                        with Image.open(path) as image:
                            return np.asarray(image)
                    cases[f"{name}-{auto_scale}-{as_uint16}-{first}"] = _outcome(save_and_read)
    return cases


def minmax_cases(iu):
    """minmax_auto_scale of constant and random images, to uint8 and uint16."""
    rng = R(3)
    images = {"zeros": np.zeros((2, 3)), "tens": np.full((2, 3), 10.0),
              "random": rng.rand(2, 3) * 10 - 5}
    return {f"{name}-{u16}": _outcome(lambda: iu.minmax_auto_scale(img, u16))
            for name, img in images.items() for u16 in (False, True)}
