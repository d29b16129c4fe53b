"""Parametric functions (``import dpnb.parametric_functions as PF``): a function
plus the parameters it owns, created on first call and reused after.  As in nnabla
they live in a scope named after the function (``affine``, ``conv``, ``bn``), inside
the scope ``name`` where that is given: ``PF.convolution(x, 8, (3, 3), name="c1")``
owns ``c1/conv/W`` and ``c1/conv/b``."""
from .activation import *  # noqa: F401,F403
from .attention import *  # noqa: F401,F403
from .binary import *  # noqa: F401,F403
from .convolutional import *  # noqa: F401,F403
from .embedding import *  # noqa: F401,F403
from .factorization import *  # noqa: F401,F403
from .linear import *  # noqa: F401,F403
from .normalization import *  # noqa: F401,F403
from .quantization import *  # noqa: F401,F403
from .recurrent import *  # noqa: F401,F403
# nnabla's PF module also offers these to the programs that import them from it.
from ..initializer import (ConstantInitializer, NormalInitializer,  # noqa: F401,E402
                           UniformInitializer, WeightNormalizationScaleInitializer,
                           calc_uniform_lim_glorot)
from ..parameter import get_parameter, get_parameter_or_create  # noqa: F401,E402
from ._common import parametric_function_api  # noqa: F401,E402
