"""Initializers against nnabla 1.39 (recorded by tests/fixtures/nnabla/record_initializers.py):
RangeInitializer and WeightNormalizationScaleInitializer values, UniformIntInitializer
draws from a seeded RandomState, and the dtypes and shapes of all four."""
import json
import os

import numpy as np
import pytest

import dpnb as nn
import dpnb.initializer as I

with open(os.path.join(os.path.dirname(__file__), "fixtures", "nnabla",
                       "initializers.json")) as f:
    RECORD = json.load(f)


def ids(kind, keys):
    return [f"{kind}-" + "-".join(str(case[k]) for k in keys) for case in RECORD[kind]]


@pytest.mark.parametrize("case", RECORD["range"], ids=ids("range", ("start", "step", "shape")))
def test_range_initializer_matches_nnabla(case):
    value = I.RangeInitializer(case["start"], case["step"])(tuple(case["shape"]))
    assert value.dtype == np.dtype(case["dtype"]) and value.shape == tuple(case["shape"])
    np.testing.assert_array_equal(value, np.array(case["value"], dtype=case["dtype"]).reshape(
        case["shape"]))


@pytest.mark.parametrize("case", RECORD["norm"], ids=ids("norm", ("dim", "eps")))
def test_weight_normalization_scale_matches_nnabla(case):
    w = nn.Variable.from_numpy_array(np.array(case["w"], dtype=np.float32))
    count = w.shape[case["dim"]]
    value = I.WeightNormalizationScaleInitializer(w, case["dim"], case["eps"])((count,))
    assert value.dtype == np.dtype(case["dtype"]) and value.shape == (count,)
    np.testing.assert_allclose(value, case["value"], rtol=1e-6)


@pytest.mark.parametrize("case", RECORD["int"], ids=ids("int", ("lim", "shape", "seed")))
def test_uniform_int_initializer_draws_as_nnabla(case):
    init = I.UniformIntInitializer(tuple(case["lim"]), rng=np.random.RandomState(case["seed"]))
    value = init(tuple(case["shape"]))
    assert repr(init) == case["repr"]
    assert value.dtype == np.dtype(case["dtype"])
    np.testing.assert_array_equal(value, case["value"])


@pytest.mark.parametrize("case", RECORD["orthogonal"], ids=ids("orthogonal", ("gain", "shape")))
def test_orthogonal_initializer_dtype_and_shape_are_nnabla_s(case):
    init = I.OrthogonalInitializer(case["gain"], rng=np.random.RandomState(0))
    value = init(tuple(case["shape"]))
    assert repr(init) == case["repr"]
    assert value.dtype == np.dtype(case["dtype"]) and list(value.shape) == case["result_shape"]
