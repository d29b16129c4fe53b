"""The one exception family of dpnb."""


class DpnbError(RuntimeError):
    """Raised for every misuse dpnb detects: the message says what was expected,
    what was got, and what to do about it.

    A ``RuntimeError``, as nnabla's errors from its functions, graph and solvers are
    (``value error in setup_impl`` ...), so that programs' ``except RuntimeError``
    catch dpnb's clearer ones too."""


class DpnbValueError(DpnbError, ValueError):
    """A value that does not fit where it goes (an array whose shape does not broadcast
    to a variable's): a ``ValueError`` too, as nnabla raises there."""


class DpnbTypeError(DpnbError, TypeError):
    """An argument of the wrong type where nnabla raises ``TypeError`` (``F.linspace``'s
    ``num`` given as a float)."""


class ExtensionUnavailableError(DpnbError, ImportError):
    """An extension ("cuda", "cudnn") this machine cannot run: an ImportError too,
    as nnabla raises where the extension is not installed, so that programs'
    ``except ImportError`` fallbacks to the CPU work unchanged."""


class CommunicatorError(DpnbError):
    """A collective failed; the communicator is left broken."""


class CommunicatorTimeout(CommunicatorError):
    """A collective did not finish within the communicator's timeout."""


class CommunicatorInterrupted(CommunicatorError, KeyboardInterrupt):
    """Ctrl-C or ipyparallel's interrupt arrived while a collective was waiting.

    It is also a ``KeyboardInterrupt``, so code that stops on Ctrl-C still does."""


class AgreementError(DpnbError):
    """The ranks of a group called different collectives, or passed different arrays."""


class RankArgumentError(AgreementError):
    """A rank refused its own arguments to a collective (a non-contiguous array, a
    root out of range, ...) and told the other ranks of the group: every rank
    raises it before anything is sent, naming those ranks and their errors, and
    the communicator stays usable."""


class ClusterGone(DpnbError):
    """The cluster a cell or call needs is gone (stopped from outside, killed, its engines
    dead): the message says which and how to restart.  IPython shows only the message, as
    the traceback holds dpnb's and ipyparallel's frames, none of the user's."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]
