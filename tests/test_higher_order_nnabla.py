"""Issue 27: a WGAN-GP critic step and a MAML outer step, written once in nnabla's idiom
(tests/nnabla_higher_order.py), run on dpnb standing in for nnabla, against what the
real nnabla 1.39 computed from the same code (tests/fixtures/nnabla/higher_order.npz,
recorded by record_higher_order.py): on 1 rank here, and on 2 ranks, each with half of
the batch (or of the meta-batch) and the gradients averaged by all_reduce
(tests/mpi_scripts/higher_order_nnabla.py).

WGAN-GP's critic solver is Adam, whose first update is nearly alpha * sign(gradient):
its updated parameters say little beyond the gradients' signs, so the gradients are
compared first and on their own.  MAML's outer update is plain SGD."""
from pathlib import Path

import numpy as np
import pytest

import dpnb as nn
from dpnb.testing import check_ranks

HERE = Path(__file__).parent
RECORD = dict(np.load(HERE / "fixtures" / "nnabla" / "higher_order.npz"))
# float32 through two levels of differentiation: the sums may be taken in another order
RTOL, ATOL = 1e-4, 1e-5


def recorded(prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in RECORD.items() if k.startswith(prefix)}


def close(got, want, what):
    assert got.dtype == np.float32 and got.shape == want.shape, (what, got.dtype, got.shape)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=what)


@pytest.fixture(scope="module")
def H():
    """tests/nnabla_higher_order.py, the code the fixture was recorded with, imported with
    dpnb standing in for nnabla (the alias is process-wide once on, as in
    test_communicator_nnabla.py; here it comes on when these tests run, not when
    they are collected)."""
    nn.use_as_nnabla()
    import nnabla_higher_order

    return nnabla_higher_order


@pytest.fixture(autouse=True)
def _fresh():
    nn.clear_parameters()
    nn.set_auto_forward(False)
    yield
    nn.clear_parameters()


def test_the_fixture_says_where_it_came_from(H):
    assert str(RECORD["script"]) == "tests/fixtures/nnabla/record_higher_order.py"
    assert str(RECORD["nnabla_version"]) == "1.39.0"
    assert H.nn is nn and H.F is nn.functions   # the program runs on dpnb, not nnabla


def test_the_inputs_are_the_ones_the_program_makes(H):
    for k, v in H.wgan_gp_inputs().items():
        np.testing.assert_array_equal(v, RECORD[f"wgan_gp/input/{k}"])
    for k, v in H.maml_inputs().items():
        np.testing.assert_array_equal(v, RECORD[f"maml/input/{k}"])


def test_wgan_gp_critic_step_as_nnabla(H):
    inputs = recorded("wgan_gp/input/")
    loss, parts = H.wgan_gp_loss(inputs["real"], inputs["fake"], inputs["alpha"])
    params = H.set_parameters(recorded("wgan_gp/init/"), "critic")
    grads = H.step(loss, H.wgan_gp_solver(params), params)
    close(loss.d, RECORD["wgan_gp/loss"], "loss")
    for k, v in parts.items():
        close(v.d, RECORD[f"wgan_gp/{k}"], k)
    want_grads, want_updated = recorded("wgan_gp/grad/"), recorded("wgan_gp/updated/")
    assert sorted(grads) == sorted(want_grads)
    for k, p in params.items():
        close(grads[k], want_grads[k], f"gradient of {k}")
        close(p.d, want_updated[k], f"{k} after Adam's update")


def test_maml_outer_step_as_nnabla(H):
    loss, inner = H.maml_loss(**recorded("maml/input/"))
    params = H.set_parameters(recorded("maml/init/"), "maml")
    grads = H.step(loss, H.maml_solver(params), params)
    close(loss.d, RECORD["maml/loss"], "outer loss")
    close(np.stack([v.d for v in inner]), RECORD["maml/inner"], "inner losses")
    want_grads, want_updated = recorded("maml/grad/"), recorded("maml/updated/")
    assert sorted(grads) == sorted(want_grads)
    for k, p in params.items():
        close(grads[k], want_grads[k], f"outer gradient of {k}")
        close(p.d, want_updated[k], f"{k} after the outer update")


def test_maml_outer_forward_computes_the_inner_losses_as_in_nnabla(H):
    loss, inner = H.maml_loss(**recorded("maml/input/"))
    H.set_parameters(recorded("maml/init/"), "maml")
    loss.forward()
    close(np.stack([v.d for v in inner]), RECORD["maml/inner_after_outer_forward"],
          "inner losses after the outer forward alone")


def test_both_steps_data_parallel_on_2_ranks_as_nnabla_on_the_whole_batch():
    check_ranks(2, HERE / "mpi_scripts" / "higher_order_nnabla.py", timeout=180)
