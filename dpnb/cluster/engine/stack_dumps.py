"""Every thread's Python stack from an engine, on request, even while it is busy.

A busy engine's shell channel cannot be asked anything, so the request is a
signal: ``Client.send_signal(SIGNAL)`` travels over ipyparallel's control
channel to the engine's nanny, which signals the engine process.  ``install``
gives that signal a do-nothing Python handler and makes this module's pipe the
interpreter's wake-up fd, so that CPython's C-level handler writes the signal's
number into the pipe at once, whichever thread the signal lands on and whatever it
runs.  A daemon thread waits on the pipe, takes every thread's stack with
``sys._current_frames()`` and publishes it on the engine's IOPub channel (the
kernel's own session and socket) as display data under the parent id
``record_id(engine id)``.  No client owns that id, so no notebook shows it; the
controller's hub stores IOPub display data by parent id in its task database,
where any client, in any process, reads it with ``Client.db_query`` — also one
that never talked to the engines, while another notebook's cell keeps them busy.

The stacks are read holding the GIL, so no thread changes its frames meanwhile:
faulthandler, which reads them from the signal handler without the GIL, can crash
the process when another thread runs Python at that moment (CPython issue 116008).
The GIL comes quickly: a pure Python loop yields it every switch interval, and
blocking calls that release it (NumPy on large arrays, MPI waits, sleeps) leave it
free; a single long C call that holds it delays the answer until it returns.
At most ``MAX_FRAMES`` frames a thread are kept; a thread cut short is marked so.

``SIGWINCH`` is the signal because its default action is to do nothing: an
engine that was not started by ``dpnb.cluster.engine`` ignores it instead of
dying."""
from __future__ import annotations

import itertools
import logging
import os
import signal
import sys
import sysconfig
import threading
from collections.abc import Callable

from .calls import identity

log = logging.getLogger(__name__)

SIGNAL = "SIGWINCH"
KEY = "dpnb_stacks"
MIME = "application/vnd.dpnb.stacks+json"
MAX_FRAMES = 100                # per thread; deeper stacks are cut, innermost frames kept

# Frame kinds: user code, dpnb's collectives, the rest of dpnb, other installed libraries and
# the standard library (NumPy's Python layer ...), and the machinery that runs engines
# (kernel, messaging, event loops, threads, dpnb's engine entry point and this module).
USER, COLLECTIVE, DPNB, LIBRARY, PLUMBING = "user", "collective", "dpnb", "library", "plumbing"
_PLUMBING_PACKAGES = ("ipykernel", "ipyparallel", "IPython", "zmq", "tornado", "traitlets",
                      "jupyter_client", "asyncio", "concurrent")
_PLUMBING_MODULES = ("threading", "selectors", "runpy")


def _ignore(signum, frame) -> None:
    """The Python-level handler: the work is the wake-up byte, read by the dump thread."""


class StackDumper:
    """The engine's dump service: the wake-up pipe the signal writes into and the
    thread that takes and hands on (``publish``) the stacks when it does."""

    def __init__(self, signum: int, publish: Callable[[list[dict]], None]):
        self.signum = signum
        self.publish = publish
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)  # a signal handler must never block
        self._prefixes: tuple | None = None
        signal.signal(signum, _ignore)
        # Python's handlers make the system calls they land in fail with EINTR, which C
        # libraries (MPI's progress, a socket read) may not retry: restart them instead.
        signal.siginterrupt(signum, False)
        signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        threading.Thread(target=self._serve, name="dpnb-stacks", daemon=True).start()
        # A forked child (a data loader's worker) has no dump thread: its signal is left
        # to do nothing, as the default, and the pipe is closed.
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(self.signum, signal.SIG_DFL)
        except ValueError:  # forked from a thread other than the main one: nothing to undo
            pass
        os.close(self.read_fd)
        os.close(self.write_fd)

    def _serve(self) -> None:
        while True:
            # The pipe carries the number of every signal with a Python handler.
            if self.signum not in os.read(self.read_fd, 512):
                continue
            try:
                self.publish(thread_stacks(self._frame_prefixes()))
            except Exception:  # one failed dump must not end the service
                log.exception("publishing a stack dump failed")

    def _frame_prefixes(self) -> tuple:
        """(collective, dpnb, plumbing, libraries) path prefixes, found once the engine runs (when
        the kernel's packages are all imported)."""
        if self._prefixes is None:
            # Compared with the code objects' file names, which are the modules' __file__.
            engine = os.path.dirname(__file__)
            package = os.path.dirname(os.path.dirname(engine))
            plumbing = []
            for name in _PLUMBING_PACKAGES:
                module = sys.modules.get(name)
                if getattr(module, "__file__", None):
                    plumbing.append(os.path.dirname(module.__file__) + os.sep)
            for name in _PLUMBING_MODULES:
                module = sys.modules.get(name)
                if getattr(module, "__file__", None):
                    plumbing.append(module.__file__)
            plumbing += [os.path.join(engine, "__main__.py"), os.path.join(engine, "start.py"),
                         __file__]
            paths = sysconfig.get_paths()
            libraries = {os.path.join(paths[k], "") for k in ("purelib", "platlib", "stdlib")}
            self._prefixes = (os.path.join(package, "communicators", ""),
                              os.path.join(package, ""), tuple(plumbing), tuple(libraries))
        return self._prefixes


def thread_stacks(prefixes: tuple, limit: int = MAX_FRAMES) -> list[dict]:
    """Every thread of this process with its name, whether it is the main thread, its
    frames (innermost first, at most ``limit``) as ``(file, line, function, kind)`` and
    whether there were more.  Called holding the GIL, as Python code is."""
    names = {t.ident: t.name for t in threading.enumerate()}
    main = threading.main_thread().ident
    threads = []
    for ident, frame in sys._current_frames().items():
        frames = []
        while frame is not None and len(frames) < limit:
            file = frame.f_code.co_filename
            frames.append((file, frame.f_lineno, frame.f_code.co_name, classify(file, prefixes)))
            frame = frame.f_back
        threads.append({"ident": ident, "name": names.get(ident, "(unnamed)"),
                        "main": ident == main, "cut": frame is not None, "frames": frames})
    return threads


def classify(file: str, prefixes: tuple) -> str:
    """The kind of a frame in ``file``: USER, COLLECTIVE, DPNB, LIBRARY or PLUMBING."""
    collective, dpnb, plumbing, libraries = prefixes
    if file.startswith(collective):
        return COLLECTIVE
    if file.startswith(("<frozen ", *plumbing)):
        return PLUMBING
    if file.startswith(dpnb):
        return DPNB
    if file.startswith(libraries):
        return LIBRARY
    return USER


_sequence = itertools.count(1)  # tells one dump of this engine from the next


def publish_on_iopub(threads: list[dict]) -> None:
    """Send a dump on IOPub under this engine's record id, for the hub to store."""
    kernel = _kernel()
    if kernel is None:              # the engine is still starting: nobody to tell
        return
    engine_id = kernel.engine_id
    payload = {**identity(), "engine": engine_id, "sequence": next(_sequence),
               "threads": threads}
    parent = {"msg_id": record_id(engine_id), "session": KEY, "msg_type": KEY,
              "username": KEY, "version": "5.3"}
    kernel.session.send(kernel.iopub_socket, "display_data",
                        {"data": {MIME: payload}, "metadata": {}}, parent=parent,
                        ident=f"engine.{engine_id}.{KEY}".encode())


def _kernel():
    """The running engine's kernel, else None."""
    app = sys.modules.get("ipyparallel.engine.app")
    if app is None or not app.IPEngine.initialized():
        return None
    return getattr(app.IPEngine.instance(), "kernel", None)


_dumper: StackDumper | None = None


def install() -> bool:
    """Start the dump service for ``SIGNAL`` in this process (once, from the main thread);
    False where the platform has no such signal, or another handler or wake-up fd is
    in place already."""
    global _dumper
    if _dumper is not None:
        return True
    signum = getattr(signal, SIGNAL, None)
    if signum is None:
        return False
    previous = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(previous)
    if previous != -1 or signal.getsignal(signum) not in (signal.SIG_DFL, signal.SIG_IGN, None):
        log.warning("%s or the signal wake-up fd is in use already; engine stacks will not be "
                    "available", SIGNAL)
        return False
    _dumper = StackDumper(signum, publish_on_iopub)
    return True


def record_id(engine_id: int) -> str:
    """The id of the hub's record that holds engine ``engine_id``'s latest dump."""
    return f"{KEY}-{engine_id}"
