"""nnabla's ``nnabla.solver`` module (``nn.solver.Solver``): the solver base class
and the solvers, the same objects as in ``dpnb.solvers``."""
from .solvers import *  # noqa: F401,F403
from .solvers import Solver, SolverState  # noqa: F401
