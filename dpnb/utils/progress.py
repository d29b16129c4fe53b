"""nnabla's ``nnabla.utils.progress``: report how far a long job (a cache being built,
a network being trained) has gone, into a state file that other tools poll and to a
callback, as nnabla's command line tools do."""
from __future__ import annotations

import time
from collections.abc import Callable

from ..errors import DpnbError
from ..logger import logger

_STATE_INTERVAL_S = 1.0  # nnabla rewrites the state file at most once a second
_WRITE_RETRIES = 100


class _Progress:
    """Where progress goes: the state file's name ('' for none) and the callback."""

    def __init__(self):
        self.state_file = ""
        self.callback: Callable[[str | None, float], None] | None = None
        self.last_write = float("-inf")


_progress = _Progress()


def configure_progress(file_name: str | None, cb: Callable[[str | None, float], None] | None = None
                       ) -> None:
    """Send progress to the file ``file_name`` and to ``cb(state, progress)`` (None keeps
    what was configured), then empty the state file."""
    if file_name is not None:
        _progress.state_file = str(file_name)
    if cb is not None:
        if not callable(cb):
            raise DpnbError(f"configure_progress: cb must be callable as cb(state, progress), "
                            f"got {type(cb).__name__}")
        _progress.callback = cb
    progress(None)


def _write_state(text: str) -> None:
    """Replace the state file's content, retrying while another process holds it."""
    for attempt in range(1, _WRITE_RETRIES + 1):
        try:
            with open(_progress.state_file, "w") as f:
                f.write(text)
            return
        except OSError:
            if attempt == _WRITE_RETRIES:
                logger.critical("Failed to write to %s.", _progress.state_file)
                raise
            time.sleep(0.1)


def progress(state: str | None, progress: float = 0.0) -> None:
    """Report ``state`` at ``progress`` (0 to 1): the state file gets
    ``"<state> (<percent>%)"`` (at most once a second; None empties it at once) and the
    configured callback gets ``(state, progress)``."""
    if _progress.state_file:
        now = time.monotonic()
        if state is None or now - _progress.last_write > _STATE_INTERVAL_S:
            _progress.last_write = now
            _write_state("" if state is None else f"{state} ({progress * 100:3.2f}%)")
    if _progress.callback is not None:
        _progress.callback(state, progress)
