"""Every case of tests/nnabla_cases/functions_<family>.py: dpnb's outputs and
gradients against those recorded from nnabla 1.39 (record_functions.py), and its
float64 first and second derivatives (nn.grad's gradient graph) against central
differences."""
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from nnabla_cases import functions

import dpnb as nn
import dpnb.functions as F
import dpnb.parametric_functions as PF
from dpnb.ext_utils import get_extension_context

FIXTURES = Path(__file__).parent / "fixtures" / "nnabla" / "functions"
LIB = functions.library(nn, F, PF, get_extension_context("cpu", type_config="double"))
CASES = functions.all_cases()
IDS = [f"{family}:{case.name}" for family, case in CASES]


def recorded(family: str) -> dict[str, dict[str, np.ndarray]]:
    """The fixture of a family, as case name -> result key -> array."""
    cases: dict[str, dict[str, np.ndarray]] = {}
    with np.load(FIXTURES / f"{family}.npz") as data:
        for key in data.files:
            name, result = key.split(functions.SEPARATOR)
            cases.setdefault(name, {})[result] = data[key]
    return cases


RECORDED = {family: recorded(family) for family in functions.families()}


@pytest.mark.parametrize("family, case", CASES, ids=IDS)
def test_matches_nnabla(family, case):
    want = RECORDED[family].get(case.name)
    assert want is not None, (f"no nnabla record of {case.name!r}: run "
                              f"tests/fixtures/nnabla/record_functions.py {family} with nnabla")
    got = functions.run(LIB, case)
    assert sorted(got) == sorted(want), f"result keys {sorted(got)} != nnabla's {sorted(want)}"
    for key, value in want.items():
        assert got[key].shape == value.shape, f"{key}: shape {got[key].shape} != {value.shape}"
        np.testing.assert_allclose(got[key], value, rtol=case.rtol, atol=case.atol, err_msg=key)


@pytest.mark.parametrize("family, case", CASES, ids=IDS)
def test_matches_nnabla_on_gpu(family, case, gpu):
    with nn.context_scope(get_extension_context("cudnn")):
        got = functions.run(LIB, case)
    for key, value in RECORDED[family][case.name].items():
        np.testing.assert_allclose(got[key], value, rtol=case.rtol, atol=case.atol, err_msg=key)


FD_CASES = [(f, c) for f, c in CASES if c.grad and c.fd]


@pytest.mark.parametrize("family, case", FD_CASES,
                         ids=[f"{f}:{c.name}" for f, c in FD_CASES])
def test_gradients_by_finite_differences(family, case):
    assert functions.finite_difference_errors(LIB, case) == []


@pytest.mark.parametrize("family, case", FD_CASES,
                         ids=[f"{f}:{c.name}" for f, c in FD_CASES])
def test_second_derivatives_by_finite_differences(family, case):
    assert functions.second_order_errors(LIB, case) == []


def test_every_recorded_case_still_exists():
    for family, cases in RECORDED.items():
        names = {c.name for c in functions.family_cases(family)}
        assert set(cases) <= names, f"{family}.npz records cases no longer defined: {sorted(set(cases) - names)}"


# Functions whose values depend on a random draw (tests/test_functions_stochastic.py and
# test_functions_attention.py check them by their properties) or on a communicator
# (test_sync_batch_normalization.py runs them across MPI processes).
NOT_RECORDABLE = {"rand", "randn", "randint", "rand_binomial", "rand_beta", "rand_gamma",
                  "random_choice", "random_crop", "random_flip", "random_shift", "random_erase",
                  "dropout", "image_augmentation", "sync_batch_normalization",
                  "PF.sync_batch_normalization"}


def test_every_function_has_a_case():
    public = {name for module in (F.__name__, PF.__name__)
              for name in functions_of(module)}
    called = functions.called_functions(LIB, [case for _, case in CASES])
    assert sorted(public - called - NOT_RECORDABLE) == []
    assert sorted(NOT_RECORDABLE - public) == []


def functions_of(module_name: str) -> list[str]:
    """The public functions of dpnb.functions, or of dpnb.parametric_functions as
    ``PF.<name>``, as their family modules export them."""
    package = F if module_name == F.__name__ else PF
    prefix = "" if package is F else "PF."
    return [prefix + name for value in vars(package).values()
            if isinstance(value, ModuleType) and value.__name__.startswith(package.__name__ + ".")
            for name in getattr(value, "__all__", [])]
