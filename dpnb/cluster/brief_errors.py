"""Brief display of dpnb's communicator errors in ``%%px`` cells, installed on each engine.

A mismatched or failed collective raises an error whose message names the ranks,
the collectives and what to do; the ~40 lines of dpnb's own frames above it tell a
notebook user nothing.  On the engines these errors show as the user's cell lines
and the message; every other error keeps IPython's full traceback."""
from __future__ import annotations

import linecache

from ..errors import AgreementError, CommunicatorError

BRIEF = (AgreementError, CommunicatorError)


def brief_traceback(shell, etype, value, tb) -> list[str]:
    """The cell frames of ``tb`` (label, line number, source line) and ``Name: message``."""
    lines = []
    while tb is not None:
        code = tb.tb_frame.f_code
        label = shell.compile.format_code_name(code.co_filename)
        if label is not None:
            source = linecache.getline(code.co_filename, tb.tb_lineno).strip()
            lines.append(f"{label[0]} {label[1]}, line {tb.tb_lineno}")
            lines.append(f"----> {source}")
        tb = tb.tb_next
    lines.append(f"{etype.__name__}: {value}")
    return lines


def _show_briefly(shell, etype, value, tb, tb_offset=None):
    stb = brief_traceback(shell, etype, value, tb)
    # the shell's display hook: ipykernel's sends the error to the notebook and
    # keeps it as the traceback of the execute reply that ipyparallel shows
    shell._showtraceback(etype, value, stb)
    return stb


def install(shell) -> None:
    """Show dpnb's communicator errors briefly in ``shell`` (an engine's IPython shell)."""
    shell.set_custom_exc(BRIEF, _show_briefly)
