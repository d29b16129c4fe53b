"""Every thread's Python stack from an engine, on request, even while it is busy.

A busy engine's shell channel cannot be asked anything, so the request is a
signal: ``Client.send_signal(SIGNAL)`` travels over ipyparallel's control
channel to the engine's nanny, which signals the engine process.  ``install``
registers ``faulthandler`` for that signal at engine start: its C-level handler
writes every thread's stack into a pipe at once, whether or not the interrupted
code holds the GIL.  A daemon thread reads the pipe, parses the dump and
publishes it on the engine's IOPub channel (the kernel's own session and socket)
as display data under the parent id ``record_id(engine id)``.  No client owns that
id, so no notebook shows it; the controller's hub stores IOPub display data by
parent id in its task database, where any client, in any process, reads it with
``Client.db_query`` — also one that never talked to the engines, while another
notebook's cell keeps them busy.

``SIGWINCH`` is the signal because its default action is to do nothing: an
engine that was not started by ``dpnb.cluster.engine`` ignores it instead of
dying.  The dump is taken when the signal arrives; publishing it needs the GIL,
which a single long C call that holds the GIL (most NumPy calls on large arrays
release it) delays until that call returns.  faulthandler reads the frames
without the GIL, as it does for crashes (a best effort), and writes at most 100
threads and 100 frames per thread; a thread cut short is marked so."""
from __future__ import annotations

import faulthandler
import logging
import os
import re
import select
import signal
import sys
import threading

from .engine_side import identity

log = logging.getLogger(__name__)

SIGNAL = "SIGWINCH"
KEY = "dpnb_stacks"
MIME = "application/vnd.dpnb.stacks+json"
_QUIET = 0.02                   # seconds without new bytes that end one dump
_PIPE_BYTES = 1 << 20           # room for a dump of many threads; more is cut, never blocks
_HEADER = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):$")
_FRAME = re.compile(r'^  File "(.*)", line (\d+|\?\?\?) in (.*)$')

# Frame kinds: user code, dpnb's collectives, the rest of dpnb, and the machinery that runs
# engines (kernel, messaging, event loops, threads, dpnb's engine entry point and this module).
USER, COLLECTIVE, DPNB, PLUMBING = "user", "collective", "dpnb", "plumbing"
_PLUMBING_PACKAGES = ("ipykernel", "ipyparallel", "IPython", "zmq", "tornado", "traitlets",
                      "jupyter_client", "asyncio", "concurrent")
_PLUMBING_MODULES = ("threading", "selectors", "runpy")


class StackDumper:
    """The engine's dump handler: the pipe faulthandler writes into and the thread
    that publishes what it reads."""

    def __init__(self, signum: int):
        self.read_fd, self.write_fd = os.pipe()
        # Never block the signal handler: it may have interrupted the thread that holds
        # the GIL, which the reader needs to drain the pipe.  A dump too big is cut.
        os.set_blocking(self.write_fd, False)
        _enlarge_pipe(self.write_fd)
        self.sequence = 0
        self._prefixes: tuple | None = None
        faulthandler.register(signum, file=self.write_fd, all_threads=True, chain=False)
        threading.Thread(target=self._serve, name="dpnb-stacks", daemon=True).start()
        # A forked child (a data loader's worker) has no reader: its dumps would pass for
        # the engine's, so it forgets the handler and the pipe.
        os.register_at_fork(after_in_child=lambda: self._forget(signum))

    def _forget(self, signum: int) -> None:
        faulthandler.unregister(signum)
        os.close(self.read_fd)
        os.close(self.write_fd)

    def _serve(self) -> None:
        while True:
            text = self._read_dump()
            try:
                self._publish(text)
            except Exception:  # one failed dump must not end the service
                log.exception("publishing a stack dump failed")

    def _read_dump(self) -> str:
        """The next dump: the bytes up to a pause of ``_QUIET`` seconds."""
        chunks = [os.read(self.read_fd, 1 << 16)]
        while select.select([self.read_fd], [], [], _QUIET)[0]:
            chunks.append(os.read(self.read_fd, 1 << 16))
        return b"".join(chunks).decode("utf-8", "backslashreplace")

    def _publish(self, text: str) -> None:
        """Send the dump on IOPub under this engine's record id, for the hub to store."""
        kernel = _kernel()
        if kernel is None:              # the engine is still starting: nobody to tell
            return
        self.sequence += 1
        engine_id = kernel.engine_id
        payload = {**identity(), "engine": engine_id, "sequence": self.sequence,
                   "threads": self._threads(text), "text": text}
        parent = {"msg_id": record_id(engine_id), "session": KEY, "msg_type": KEY,
                  "username": KEY, "version": "5.3"}
        kernel.session.send(kernel.iopub_socket, "display_data",
                            {"data": {MIME: payload}, "metadata": {}}, parent=parent,
                            ident=f"engine.{engine_id}.{KEY}".encode())

    def _threads(self, text: str) -> list[dict]:
        """The dump's threads, each with its name, whether it is the main thread and
        its frames (innermost first) as ``(file, line, function, kind)``."""
        names = {t.ident: t.name for t in threading.enumerate()}
        main = threading.main_thread().ident
        prefixes = self._frame_prefixes()
        threads = []
        for ident, frames, cut in parse_dump(text):
            threads.append({"ident": ident, "name": names.get(ident, "(unnamed)"),
                            "main": ident == main, "cut": cut,
                            "frames": [(f, line, fn, classify(f, prefixes))
                                       for f, line, fn in frames]})
        return threads

    def _frame_prefixes(self) -> tuple:
        """(collective, dpnb, plumbing) path prefixes, found once the engine runs (when
        the kernel's packages are all imported)."""
        if self._prefixes is None:
            # Compared with the code objects' file names, which are the modules' __file__.
            package = os.path.dirname(os.path.dirname(__file__))
            plumbing = []
            for name in _PLUMBING_PACKAGES:
                module = sys.modules.get(name)
                if getattr(module, "__file__", None):
                    plumbing.append(os.path.dirname(module.__file__) + os.sep)
            for name in _PLUMBING_MODULES:
                module = sys.modules.get(name)
                if getattr(module, "__file__", None):
                    plumbing.append(module.__file__)
            plumbing += [os.path.join(package, "cluster", "engine.py"), __file__]
            self._prefixes = (os.path.join(package, "communicators", ""),
                              os.path.join(package, ""), tuple(plumbing))
        return self._prefixes


def parse_dump(text: str) -> list[tuple[int, list[tuple[str, int | None, str]], bool]]:
    """faulthandler's all-threads text as ``[(thread ident, frames, cut), ...]``; frames are
    ``(file, line, function)``, innermost first; ``cut`` where faulthandler left frames out.
    Where two dumps ran together, the last one."""
    threads: list = []
    frames: list | None = None
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            ident = int(header.group(2), 16)
            if any(t[0] == ident for t in threads):
                threads = []                  # the same thread again: a newer dump starts
            frames = []
            threads.append([ident, frames, False])
            continue
        frame = _FRAME.match(line)
        if frame and frames is not None:
            number = frame.group(2)
            frames.append((frame.group(1), None if number == "???" else int(number),
                           frame.group(3)))
        elif line.strip() == "..." and threads:
            threads[-1][2] = True
    return [tuple(t) for t in threads]


def classify(file: str, prefixes: tuple) -> str:
    """The kind of a frame in ``file``: USER, COLLECTIVE, DPNB or PLUMBING."""
    collective, dpnb, plumbing = prefixes
    if file.startswith(collective):
        return COLLECTIVE
    if file.startswith(("<frozen ", *plumbing)):
        return PLUMBING
    if file.startswith(dpnb):
        return DPNB
    return USER


def _enlarge_pipe(fd: int) -> None:
    """Give the pipe ``_PIPE_BYTES`` where the OS allows it (Linux), else keep its size."""
    import fcntl

    setting = getattr(fcntl, "F_SETPIPE_SZ", None)
    if setting is None:
        return
    try:
        fcntl.fcntl(fd, setting, _PIPE_BYTES)
    except OSError as e:  # above the system's limit: the default size still works
        log.debug("pipe for stack dumps keeps its size: %s", e)


def _kernel():
    """The running engine's kernel, else None."""
    app = sys.modules.get("ipyparallel.engine.app")
    if app is None or not app.IPEngine.initialized():
        return None
    return getattr(app.IPEngine.instance(), "kernel", None)


_dumper: StackDumper | None = None


def install() -> bool:
    """Register the dump handler for ``SIGNAL`` in this process (once); False where the
    platform has no such signal or another handler owns it."""
    global _dumper
    if _dumper is not None:
        return True
    signum = getattr(signal, SIGNAL, None)
    if signum is None or not hasattr(faulthandler, "register"):
        return False
    if signal.getsignal(signum) not in (signal.SIG_DFL, signal.SIG_IGN, None):
        log.warning("%s has a handler already; engine stacks will not be available", SIGNAL)
        return False
    _dumper = StackDumper(signum)
    return True


def record_id(engine_id: int) -> str:
    """The id of the hub's record that holds engine ``engine_id``'s latest dump."""
    return f"{KEY}-{engine_id}"
