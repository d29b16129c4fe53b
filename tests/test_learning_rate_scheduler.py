"""nnabla.utils.learning_rate_scheduler's schedules give nnabla 1.39's rates (recorded by
fixtures/nnabla/record_schedulers.py from nnabla_cases/schedulers.py)."""
import json
from pathlib import Path

import numpy as np
import pytest

import dpnb.utils.learning_rate_scheduler as lrs
from nnabla_cases import schedulers

REC = json.loads((Path(__file__).parent / "fixtures" / "nnabla" / "schedulers.json").read_text())


@pytest.mark.parametrize("name", sorted(set(REC) - {"nnabla"}))
def test_rates_are_nnablas(name):
    np.testing.assert_allclose(schedulers.schedules(lrs)[name], REC[name], rtol=1e-12)


def test_the_base_class_says_what_to_define():
    with pytest.raises(NotImplementedError, match="must define get_learning_rate"):
        lrs.BaseLearningRateScheduler().get_learning_rate(0)
