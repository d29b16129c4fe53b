"""nnabla-style functions (``import dpnb.functions as F``), one module per family.

Each function is a small ``Function`` subclass holding forward and backward,
plus the lower-case call that adds it to the graph, and its nnabla network-file form
(``nnabla_spec``, see ``specs``).  Importing the package also gives
``Variable`` its arithmetic operators (``operators``): the graph does not import the
functions, the functions install themselves on it."""
from .activation import *  # noqa: F401,F403
from .array import *  # noqa: F401,F403
from .attention import *  # noqa: F401,F403
from .binary import *  # noqa: F401,F403
from .deformable import *  # noqa: F401,F403
from .detection import *  # noqa: F401,F403
from .elementary import *  # noqa: F401,F403
from .indexing import *  # noqa: F401,F403
from .inq import *  # noqa: F401,F403
from .linalg import *  # noqa: F401,F403
from .logic import *  # noqa: F401,F403
from .loss import *  # noqa: F401,F403
from .math import *  # noqa: F401,F403
from .nn import *  # noqa: F401,F403
from .normalization import *  # noqa: F401,F403
from .pooling import *  # noqa: F401,F403
from .quantization import *  # noqa: F401,F403
from .recurrent import *  # noqa: F401,F403
from .reduction import *  # noqa: F401,F403
from .sequence import *  # noqa: F401,F403
from .spectral import *  # noqa: F401,F403
from .stochastic import *  # noqa: F401,F403
from .warping import *  # noqa: F401,F403
# nnabla's functions module also offers these.
from ..context import get_current_context  # noqa: E402,F401
from ..context import with_current_context as function_api  # noqa: E402,F401
from ..graph import get_auto_forward  # noqa: E402,F401
from .operators import install_variable_operators as _install_variable_operators  # noqa: E402

_install_variable_operators()
