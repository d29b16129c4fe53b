"""The one exception family of dpnb."""


class DpnbError(Exception):
    """Raised for every misuse dpnb detects: the message says what was expected,
    what was got, and what to do about it."""


class ExtensionUnavailableError(DpnbError, ImportError):
    """An extension ("cuda", "cudnn") this machine cannot run: an ImportError too,
    as nnabla raises where the extension is not installed, so that programs'
    ``except ImportError`` fallbacks to the CPU work unchanged."""
