"""nnabla's solvers, updating parameters in flat storage with a few whole-array
operations per run of adjacent parameters.

A solver groups its parameters into runs (``dpnb.storage.contiguous_runs``):
the parameters that ``nn.get_parameter_or_create`` made in one dtype and device
are adjacent, so a whole network is one run and ``update()`` is about ten
vectorised operations instead of a Python loop over parameters.  States
(momentum, Adam's moments) are flat arrays laid out like their run, and the step
count ``t`` is kept per run.  Variables outside flat storage are runs of their
own.  The run's arrays are fetched at every call, because flat storage moves
when it grows.  Rules that need per-parameter norms (Lamb, Lars) sum squares per
parameter with ``reduceat`` over each slice of the run, never a loop per parameter.

float16 parameters are updated in float32, as nnabla's mixed precision does:
their states and scratch are float32, and each slice of parameters and
gradients is widened into float32 buffers, updated there and rounded back, so
that ``eps`` (1e-8 is 0 in float16) and ``g**2`` (it underflows) keep their values."""
from ..context import with_current_context
from .adaptive import (AMSGRAD, AMSBound, AdaBelief, AdaBound, Adadelta, Adagrad, Adam, Adamax,
                       AdamW, Lamb, RMSprop, RMSpropGraves)
from .base import (Solver, SolverState, set_solver_post_hook, set_solver_pre_hook,
                   unset_solver_post_hook, unset_solver_pre_hook)
from .sgd import Lars, Lion, Momentum, Nesterov, Sgd, SgdW

__all__ = ["Solver", "SolverState", "Sgd", "Momentum", "Nesterov", "Adam", "AdamW", "Adagrad",
           "RMSprop", "Adadelta", "Adamax", "AMSGRAD", "AdaBound", "AMSBound", "AdaBelief", "Lamb",
           "Lars", "Lion", "RMSpropGraves", "SgdW", "solver_api", "set_solver_pre_hook",
           "set_solver_post_hook", "unset_solver_pre_hook", "unset_solver_post_hook"]

solver_api = with_current_context  # nnabla's name for it in nnabla.solvers
