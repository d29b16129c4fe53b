"""Parameters: scopes, flat storage, saving and loading, the default generator."""
import io
import os
import subprocess
import sys

import numpy as np
import pytest

import dpnb as nn
import dpnb.parametric_functions as PF
from dpnb import DpnbError
from dpnb.storage import all_storages, contiguous_runs


def make_params():
    x = nn.Variable((2, 3, 8, 8))
    with nn.parameter_scope("net"):
        h = PF.convolution(x, 4, (3, 3), pad=(1, 1))
        h = PF.batch_normalization(h)
        PF.affine(h, 5)
    return x


def test_names_order_and_scopes():
    make_params()
    assert list(nn.get_parameters()) == ["net/conv/W", "net/conv/b", "net/bn/beta",
                                         "net/bn/gamma", "net/affine/W", "net/affine/b"]
    assert list(nn.get_parameters(grad_only=False))[4:6] == ["net/bn/mean", "net/bn/var"]
    with nn.parameter_scope("net") as net:
        assert list(nn.get_parameters())[:2] == ["conv/W", "conv/b"]
        assert nn.get_current_parameter_scope() is net
        assert list(net) == ["conv", "bn", "affine"] and list(net["bn"])[2:] == ["mean", "var"]
    assert nn.get_parameters()["net/affine/W"].shape == (4 * 8 * 8, 5)
    assert list(nn.get_current_parameter_scope()) == ["net"]


def test_parametric_functions_reuse_parameters_in_the_same_scope():
    x = nn.Variable((2, 6))
    PF.affine(x, 3)
    w = nn.get_parameters()["affine/W"]
    PF.affine(x, 3)
    assert nn.get_parameters()["affine/W"] is w and len(nn.get_parameters()) == 2
    with pytest.raises(DpnbError, match=r"affine/W.*\(6, 3\).*\(6, 4\)"):
        PF.affine(x, 4)


def test_trainable_parameters_are_adjacent_views_of_one_buffer():
    make_params()
    params = list(nn.get_parameters().values())
    (run,) = contiguous_runs(params)
    storage = run.storage
    offset = 0
    for p in params:
        assert np.shares_memory(p.d, storage.data) and np.shares_memory(p.g, storage.grad)
        assert p.d.__array_interface__["data"][0] == storage.data.__array_interface__["data"][0] + 4 * offset
        offset += p.size
    assert storage.used == offset == sum(p.size for p in params)
    stats = [v for k, v in nn.get_parameters(grad_only=False).items() if k.endswith(("mean", "var"))]
    assert not any(np.shares_memory(s.d, storage.data) for s in stats)
    assert len(all_storages()) == 2


def test_flat_arrays_see_writes_through_parameter_views():
    make_params()
    params = list(nn.get_parameters().values())
    storage = contiguous_runs(params)[0].storage
    storage.grad[...] = 1.0
    assert all(float(p.g.min()) == 1.0 for p in params)
    params[1].d[...] = 42.0
    assert float(storage.data[params[0].size]) == 42.0


def test_growth_repoints_views_and_keeps_values():
    first = nn.get_parameter_or_create("a", (1000,), np.arange(1000.0))
    handle = first.data
    first.g[...] = 2.0
    before = first.d.copy()
    for i in range(20):
        nn.get_parameter_or_create(f"p{i}", (1000,), np.full(1000, float(i)))
    storage = contiguous_runs([first])[0].storage
    assert storage.data.size == 21000 and first.data is handle
    np.testing.assert_array_equal(first.d, before)
    np.testing.assert_array_equal(first.g, 2.0)
    assert np.shares_memory(first.d, storage.data)
    (run,) = contiguous_runs(list(nn.get_parameters().values()))
    assert run.size == 21000


def test_non_adjacent_subsets_and_loose_variables_form_separate_runs():
    make_params()
    params = nn.get_parameters()
    loose = nn.Variable((3,), need_grad=True)
    runs = contiguous_runs([params["net/conv/W"], params["net/affine/W"], loose])
    assert [len(r.variables) for r in runs] == [1, 1, 1]
    assert runs[2].storage is None and runs[2].data().base is not None


def test_initializer_shape_is_checked():
    with pytest.raises(DpnbError, match=r"initializer of 'w' gave shape \(2,\), expected \(3,\)"):
        nn.get_parameter_or_create("w", (3,), np.zeros(2))


def test_a_negative_or_fractional_layer_size_names_the_parameter():
    x = nn.Variable((2, 3))
    with pytest.raises(DpnbError, match=r"affine's n_outmaps must have non-negative sizes, "
                                         r"got \(-1,\)"):
        PF.affine(x, -1)
    with pytest.raises(TypeError, match=r"affine's n_outmaps must hold whole numbers, got 2\.5"):
        PF.affine(x, 2.5)
    with pytest.raises(DpnbError, match=r"shape of parameter 'conv/conv/W' must have non-negative "
                                         r"sizes, got \(-1, 3, 3, 3\)"):
        PF.convolution(nn.Variable((2, 3, 4, 4)), -1, (3, 3), name="conv")
    assert nn.get_parameters() == {}


def test_save_and_load_round_trip(tmp_path):
    make_params()
    path = tmp_path / "params.npz"
    nn.save_parameters(path)
    saved = {k: v.d.copy() for k, v in nn.get_parameters(grad_only=False).items()}
    for v in nn.get_parameters(grad_only=False).values():
        v.d[...] = -1
    nn.load_parameters(path)
    for k, v in nn.get_parameters(grad_only=False).items():
        np.testing.assert_array_equal(v.d, saved[k])
    nn.clear_parameters()
    nn.load_parameters(path)
    loaded = nn.get_parameters(grad_only=False)
    assert list(loaded) == list(saved)
    assert not loaded["net/bn/mean"].need_grad and loaded["net/bn/beta"].need_grad
    assert len(contiguous_runs(list(nn.get_parameters().values()))) == 1


def test_load_errors(tmp_path):
    with pytest.raises(DpnbError, match="does not exist"):
        nn.load_parameters(tmp_path / "missing.npz")
    make_params()
    path = tmp_path / "params.npz"
    nn.save_parameters(path)
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(path.read_bytes()[: os.path.getsize(path) // 2])
    with pytest.raises(DpnbError, match=r"truncated or not a \.npz parameter file"):
        nn.load_parameters(truncated)
    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, w=np.zeros(3))
    with pytest.raises(DpnbError, match="not written by dpnb.save_parameters"):
        nn.load_parameters(foreign)
    with pytest.raises(DpnbError, match=r"file <_io.BytesIO .* truncated or not a \.npz parameter file"):
        nn.load_parameters(io.BytesIO(b"not an archive"), extension=".npz")
    nn.clear_parameters()
    x = nn.Variable((2, 3, 8, 8))
    with nn.parameter_scope("net"):
        PF.convolution(x, 7, (3, 3), pad=(1, 1))
    with pytest.raises(DpnbError, match=r"net/conv/W.*\(4, 3, 3, 3\).*\(7, 3, 3, 3\).*different network"):
        nn.load_parameters(path)


def test_a_crash_during_save_leaves_the_previous_file(tmp_path, monkeypatch):
    make_params()
    path = tmp_path / "params.npz"
    nn.save_parameters(path)
    good = path.read_bytes()

    def crash(f, **arrays):
        f.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", crash)
    with pytest.raises(KeyboardInterrupt):
        nn.save_parameters(path)
    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ["params.npz"]


def test_every_process_creates_the_same_initial_parameters():
    script = ("import numpy as np, dpnb as nn, dpnb.parametric_functions as PF\n"
              "PF.convolution(nn.Variable((1, 3, 4, 4)), 2, (3, 3))\n"
              "print(repr(nn.get_parameters()['conv/W'].d.ravel().tolist()))\n")
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           check=True).stdout for _ in range(2)]
    assert runs[0] == runs[1] and len(runs[0]) > 20


def test_seed_changes_and_restores_initial_values():
    def draw():
        nn.clear_parameters()
        PF.affine(nn.Variable((1, 4)), 3)
        return nn.get_parameters()["affine/W"].d.copy()

    nn.seed(1)
    a = draw()
    nn.seed(2)
    b = draw()
    nn.seed(1)
    c = draw()
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    from dpnb import random as R
    nn.seed(5)
    assert R.pseed == 5 and R.prng.rand() == np.random.RandomState(5).rand()
    nn.seed(R.DEFAULT_SEED)


def test_scope_and_creation_errors():
    for bad in (None, 3, ("a",)):
        with pytest.raises(DpnbError, match="parameter_scope's name must be a str"):
            with nn.parameter_scope(bad):
                pass
    with pytest.raises(DpnbError, match="scope must be a dict"):
        with nn.parameter_scope("a", scope=["not", "a", "dict"]):
            pass
    nn.get_parameter_or_create("w", (2,))
    with pytest.raises(DpnbError, match="'w' is a parameter, not a parameter scope"):
        nn.get_parameter_or_create("w/x/y", (2,))
    with pytest.raises(DpnbError, match="'w' is a parameter, not a parameter scope"):
        with nn.parameter_scope("w"):
            pass
    nn.get_parameter_or_create("s/p", (2,))
    with pytest.raises(DpnbError, match="'s' is a parameter scope, not a parameter"):
        nn.get_parameter_or_create("s", (2,))
    assert list(nn.get_current_parameter_scope()) == ["w", "s"]
    with pytest.raises(DpnbError, match="'v' does not exist and no shape was given"):
        nn.get_parameter_or_create("v")
    for empty in ("", "/"):
        with pytest.raises(DpnbError, match="must not be empty"):
            nn.get_parameter_or_create(empty, (2,))
    with pytest.raises(DpnbError, match="must be a NumPy/CuPy array or an initializer.*got list"):
        nn.get_parameter_or_create("v", (2,), [1.0, 2.0])


def test_clear_parameters_in_a_scope_clears_only_that_scope():
    make_params()
    nn.get_parameter_or_create("other", (3,), np.ones(3))
    with nn.parameter_scope("net/bn"):
        nn.clear_parameters()
    assert list(nn.get_parameters(grad_only=False)) == [
        "net/conv/W", "net/conv/b", "net/affine/W", "net/affine/b", "other"]
    np.testing.assert_array_equal(nn.get_parameters()["other"].d, 1.0)
    nn.clear_parameters()
    assert not nn.get_parameters(grad_only=False) and not all_storages()


def test_parameters_in_a_given_scope_dict_stay_out_of_the_global_scope():
    local = {}
    with nn.parameter_scope("loc", scope=local) as loc:
        PF.affine(nn.Variable((2, 3)), 4)
        assert nn.get_current_parameter_scope() is loc is local["loc"]
        assert list(nn.get_parameters()) == ["affine/W", "affine/b"]
    assert not nn.get_parameters() and list(local["loc"]["affine"]) == ["W", "b"]
    assert local["loc"]["affine"]["W"].shape == (3, 4)


def test_get_set_and_pop_parameter_by_path():
    w = nn.get_parameter_or_create("a/b/w", (2,), np.array([1.0, 2.0]))
    with nn.parameter_scope("a"):
        registered = nn.parameter.get_parameter("b/w")
    assert registered is not None and np.shares_memory(registered.d, w.d)
    assert nn.parameter.get_parameter("a/b/missing") is None
    loose = nn.Variable.from_numpy_array(np.zeros(3), need_grad=True)
    nn.set_parameter("a/loose", loose)
    assert nn.get_parameters()["a/loose"] is loose
    assert nn.parameter.pop_parameter("a/loose") is loose
    assert nn.parameter.pop_parameter("a/loose") is None
    assert list(nn.get_parameters()) == ["a/b/w"]
    with pytest.raises(DpnbError, match="set_parameter expects an nn.Variable"):
        nn.set_parameter("x", np.zeros(2))


def test_save_and_load_in_a_scope_and_through_file_objects(tmp_path):
    make_params()
    with nn.parameter_scope("net"):
        nn.save_parameters(tmp_path / "net.npz")
    saved = {k: v.d.copy() for k, v in nn.get_parameters(grad_only=False).items()}
    nn.clear_parameters()
    with nn.parameter_scope("copy"):
        nn.load_parameters(tmp_path / "net.npz")
    loaded = nn.get_parameters(grad_only=False)
    assert list(loaded) == [k.replace("net/", "copy/", 1) for k in saved]
    for k, v in saved.items():
        np.testing.assert_array_equal(loaded[k.replace("net/", "copy/", 1)].d, v)
    with open(tmp_path / "object", "wb") as f:
        nn.save_parameters(f, extension=".npz")
    nn.clear_parameters()
    with open(tmp_path / "object", "rb") as f:
        nn.load_parameters(f, extension=".npz")
    assert list(nn.get_parameters(grad_only=False)) == list(loaded)


def test_unknown_parameter_file_formats_are_refused(tmp_path):
    make_params()
    with pytest.raises(DpnbError, match=r"cannot save parameters in the '\.txt' format.*\.nnp, \.npz"):
        nn.save_parameters(tmp_path / "params.txt")
    with pytest.raises(DpnbError, match=r"cannot load parameters in the '\.pkl' format.*extension="):
        nn.load_parameters(io.BytesIO(b"x"), extension=".pkl")
    with pytest.raises(DpnbError, match="cannot save parameters in the 'extensionless' format"):
        with open(tmp_path / "x", "wb") as f:
            nn.save_parameters(f)
    assert sorted(os.listdir(tmp_path)) == ["x"]


def test_parametric_functions_on_an_ndarray_compute_at_once():
    nn.clear_parameters()
    a = np.arange(24.0).reshape(2, 3, 4)
    y = PF.affine(nn.NdArray.from_numpy_array(a), 5, name="eager")
    assert isinstance(y, nn.NdArray) and y.shape == (2, 5)
    params = nn.get_parameters()
    w, b = params["eager/affine/W"].d, params["eager/affine/b"].d
    np.testing.assert_allclose(y.data, a.reshape(2, 12) @ w + b, rtol=1e-5)
    nn.clear_parameters()
