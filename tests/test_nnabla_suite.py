"""nnabla 1.39's own unit tests, unmodified, pass on dpnb: the quick subset (the first two
parametrizations of every test function), counted as ``tests/nnabla_suite.py`` counts,
and the communicator tests on 2 MPI ranks (``nnabla_suite.py --communicator``).

The floors are the numbers of tests passing outside double backward ("core"), of
double-backward tests, and of communicator tests passing on every rank; raise them as
dpnb conforms further, never lower them."""
import pytest

import nnabla_suite

CORE_FLOOR = 1060
DOUBLE_BACKWARD_FLOOR = 214
COMMUNICATOR_FLOOR = 69


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    if not (nnabla_suite.SUITE / "python" / "test").is_dir():
        pytest.skip(f"nnabla's test suite is not at {nnabla_suite.SUITE} (set DPNB_NNABLA_TESTS)")
    results = nnabla_suite.run("quick", workdir=tmp_path_factory.mktemp("suite"), timeout=1800)
    print(results.report())
    return results


def test_every_selected_test_ran(quick):
    not_run = [o.nodeid for o in quick.outcomes if o.outcome == "not run"]
    assert not not_run, f"{len(not_run)} tests did not run:\n{quick.log_tail}"
    assert len(quick.outcomes) == sum(
        outcome == "passed" for outcome in nnabla_suite.nnabla_outcomes("quick").values())


def test_core_tests_pass_above_the_floor(quick):
    passed = quick.passed({"core"})
    assert passed >= CORE_FLOOR, (f"{passed} of nnabla's core tests pass, below the floor of "
                                  f"{CORE_FLOOR}:\n{quick.report()}")


def test_double_backward_tests_pass_above_the_floor(quick):
    passed = quick.passed({"double backward"})
    assert passed >= DOUBLE_BACKWARD_FLOOR, (
        f"{passed} of nnabla's double-backward tests pass, below the floor of "
        f"{DOUBLE_BACKWARD_FLOOR}:\n{quick.report()}")


@pytest.fixture(scope="module")
def communicator(tmp_path_factory):
    if not (nnabla_suite.SUITE / "python" / "test").is_dir():
        pytest.skip(f"nnabla's test suite is not at {nnabla_suite.SUITE} (set DPNB_NNABLA_TESTS)")
    results = nnabla_suite.run_communicator(workdir=tmp_path_factory.mktemp("comm"), timeout=300)
    print(nnabla_suite.communicator_report(results))
    return results


def test_communicator_tests_run_on_every_rank(communicator):
    not_run = [o.nodeid for o in communicator.outcomes if o.outcome == "not run"]
    assert not not_run, f"{len(not_run)} tests did not run on every rank:\n{communicator.log_tail}"


def test_communicator_tests_pass_above_the_floor(communicator):
    passed = sum(o.outcome == "passed" for o in communicator.outcomes)
    assert passed >= COMMUNICATOR_FLOOR, (
        f"{passed} of nnabla's communicator tests pass on every rank, below the floor of "
        f"{COMMUNICATOR_FLOOR}:\n{nnabla_suite.communicator_report(communicator)}")
