"""Small functions the notebook sends to the engines (imported there by name)."""
from __future__ import annotations

import os
import socket


def where() -> dict:
    """Rank, host, process id and device of the engine that runs this."""
    return {
        "rank": int(os.environ.get("DPNB_RANK", -1)),
        "local_rank": int(os.environ.get("DPNB_LOCAL_RANK", -1)),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "device": os.environ.get("DPNB_DEVICE", "cpu"),
    }
