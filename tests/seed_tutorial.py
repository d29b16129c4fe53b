"""The seed tutorial's code (shared/seed/data_parallel_tutorial.ja.txt), cell by
cell, with the extension chosen for the machine.  Its imports come two ways:
verbatim (``import nnabla ...``, for engines where dpnb stands in for nnabla)
and with only ``nnabla`` changed to ``dpnb``.  Tests run it in one process or
on cluster engines."""
import dpnb

NNABLA_IMPORTS = """
import os
import time
import nnabla as nn
import nnabla.communicators as C
from nnabla.ext_utils import get_extension_context
import nnabla.functions as F
from nnabla.initializer import (
    calc_uniform_lim_glorot,
    UniformInitializer)
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
"""
IMPORTS = NNABLA_IMPORTS.replace("nnabla", "dpnb")

COMMUNICATOR = f"""
extension_module = {dpnb.default_extension()!r}
ctx = get_extension_context(extension_module)
comm = C.MultiProcessCommunicator(ctx)
comm.init()
n_devices = comm.size
mpi_rank = comm.rank
device_id = mpi_rank
ctx = get_extension_context(extension_module, device_id=device_id)
"""

SINGLE_PROCESS_CONTEXT = f"""
extension_module = {dpnb.default_extension()!r}
ctx = get_extension_context(extension_module)
"""

NETWORK_AND_STEP = """
# Data points setting
n_class = 2
b, c, h, w = 4, 1, 32, 32

# Data points
x_data = np.random.rand(b, c, h, w)
y_data = np.random.choice(n_class, b).reshape((b, 1))
x = nn.Variable(x_data.shape)
y = nn.Variable(y_data.shape)
x.d = x_data
y.d = y_data

# Network setting
C = 1
kernel = (3, 3)
pad = (1, 1)
stride = (1, 1)

rng = np.random.RandomState(0)
w_init = UniformInitializer(
    calc_uniform_lim_glorot(C, C/2, kernel=(1, 1)),
    rng=rng)

# Network
with nn.context_scope(ctx):
    h = PF.convolution(x, C, kernel, pad, stride, w_init=w_init)
    pred = PF.affine(h, n_class, w_init=w_init)
    loss = F.mean(F.softmax_cross_entropy(pred, y))

# Solver and add parameters
solver = S.Adam()
solver.set_parameters(nn.get_parameters())

# Training steps
loss.forward()
solver.zero_grad()
loss.backward()
"""

SINGLE_PROCESS = IMPORTS + SINGLE_PROCESS_CONTEXT + NETWORK_AND_STEP
DATA_PARALLEL = IMPORTS + "nn.clear_parameters()\n" + COMMUNICATOR + NETWORK_AND_STEP
# The cells as the seed has them: what a %%px user types, imports unchanged.
NNABLA_CELLS = [NNABLA_IMPORTS, COMMUNICATOR, NETWORK_AND_STEP]

ALL_REDUCE = "comm.all_reduce([x.grad for x in nn.get_parameters().values()], division=True)"


def all_reduce_is_the_mean(execute, n: int) -> tuple[dict, dict]:
    """Run the tutorial's network and all_reduce on the current cluster's ``n`` engines
    (``execute(code)`` runs code on every engine) and check that every rank's gradients
    became the float64 mean of the ranks' different gradients; (before, after) by rank."""
    import numpy as np

    from dpnb.notebook import compare, gather, gather_grads

    execute(DATA_PARALLEL)
    assert gather("(n_devices, mpi_rank)") == {r: (n, r) for r in range(n)}
    before = gather_grads()
    assert not compare(before).agree()                        # different data, different grads
    execute(ALL_REDUCE)
    after = gather_grads()
    for name in before[0]:
        mean = sum(before[r][name].astype(np.float64) for r in range(n)) / n
        for r in range(n):
            np.testing.assert_allclose(after[r][name], mean, rtol=1e-5, atol=1e-6)
    return before, after
