"""A communicator's settings, read from the environment in one place.

``from_environment()`` reads every variable below once, when the communicator
is made; its run-time properties (``comm.timeout = ...``) then replace the
frozen ``Settings`` with a new one, which the exchange reads.  Set them the
same on every rank.

=========================== ========== ================================================
Variable                    Default    Meaning (the communicator's property)
=========================== ========== ================================================
``DPNB_COMM_TIMEOUT``       600        seconds a collective may wait for the other
                                       ranks before it fails (``timeout``)
``DPNB_COMM_STALL``         30         seconds a collective waits before it prints
                                       which ranks are late; never where it is not
                                       below the timeout (``stall_seconds``)
``DPNB_COMM_CHECK``         1          1 or 0: the ranks compare each call before the
                                       data move (``check_agreement``)
``DPNB_COMM_NCCL``          1          1 or 0: GPU arrays go through NCCL where CuPy
                                       has it; read by ``init`` (``use_nccl``)
``DPNB_COMM_SEGMENT_BYTES`` 2 MB       bytes per collective of a long stretch reduced
                                       in place; 64 MB where ``init`` finds the ranks
                                       on more than one host and neither this variable
                                       nor the property chose it (``segment_bytes``)
``DPNB_COMM_BUCKET_BYTES``  2 MB       bytes of a staging bucket for small arrays
                                       (``bucket_bytes``)
=========================== ========== ================================================

Flags take 1/true/yes/on or 0/false/no/off; a malformed value raises
``DpnbError`` naming the variable."""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from ..errors import DpnbError

DEFAULT_TIMEOUT = 600.0
DEFAULT_STALL = 30.0
DEFAULT_SEGMENT_BYTES = 2 << 20  # about one L2 cache; see benchmarks/allreduce.py
# Where the ranks span hosts a long stretch goes in few large collectives: over a
# network one after the other they cost a handshake each, and cache-sized ones ran
# at 0.85x the throughput of one message, 64 MB ones at 0.96-0.99x (benchmarks/hosts.py)
HOSTS_SEGMENT_BYTES = 64 << 20
DEFAULT_BUCKET_BYTES = 2 << 20


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every setting of one communicator (see the module's table)."""

    timeout: float = DEFAULT_TIMEOUT
    stall_seconds: float = DEFAULT_STALL
    check_agreement: bool = True
    use_nccl: bool = True
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    segment_bytes_chosen: bool = False  # by the environment or the property: init keeps it
    bucket_bytes: int = DEFAULT_BUCKET_BYTES


def from_environment(environ: Mapping[str, str] = os.environ) -> Settings:
    """The settings the ``DPNB_COMM_*`` variables of ``environ`` give (the table above)."""

    def read(name: str, parse, default):
        raw = environ.get(name)
        return default if raw is None else parse(name, raw)

    return Settings(
        timeout=read("DPNB_COMM_TIMEOUT", positive_seconds, DEFAULT_TIMEOUT),
        stall_seconds=read("DPNB_COMM_STALL", positive_seconds, DEFAULT_STALL),
        check_agreement=read("DPNB_COMM_CHECK", flag, True),
        use_nccl=read("DPNB_COMM_NCCL", flag, True),
        segment_bytes=read("DPNB_COMM_SEGMENT_BYTES", positive_bytes, DEFAULT_SEGMENT_BYTES),
        segment_bytes_chosen="DPNB_COMM_SEGMENT_BYTES" in environ,
        bucket_bytes=read("DPNB_COMM_BUCKET_BYTES", positive_bytes, DEFAULT_BUCKET_BYTES))


def positive_seconds(name: str, raw) -> float:
    """``raw`` as a positive number of seconds; ``name`` (a variable or property) in the error."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = -1.0
    if not value > 0:
        raise DpnbError(f"{name} must be a positive number of seconds, got {raw!r}")
    return value


def positive_bytes(name: str, raw) -> int:
    """``raw`` as a positive number of bytes; ``name`` in the error."""
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = 0
    if value <= 0:
        raise DpnbError(f"{name} must be a positive number of bytes, got {raw!r}")
    return value


def flag(name: str, raw: str) -> bool:
    """``raw`` (1/true/yes/on or 0/false/no/off) as a bool; ``name`` in the error."""
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise DpnbError(f"{name} must be 1 or 0, got {raw!r}")
