"""The one exception family of dpnb."""


class DpnbError(Exception):
    """Raised for every misuse dpnb detects: the message says what was expected,
    what was got, and what to do about it."""
