"""Brief display of dpnb's communicator errors in ``%%px`` cells, installed on each engine.

A mismatched or failed collective raises an error whose message names the ranks,
the collectives and what to do; the ~40 lines of dpnb's own frames above it tell a
notebook user nothing.  On the engines these errors show as the user's lines (cells and
the files they call) and the message; every other error keeps IPython's full traceback."""
from __future__ import annotations

import linecache
import os

from ... import errors
from ...errors import AgreementError, CommunicatorError

BRIEF = (AgreementError, CommunicatorError)


DPNB = os.path.dirname(os.path.abspath(errors.__file__))   # the dpnb package's directory


def brief_traceback(shell, etype, value, tb) -> list[str]:
    """The user's frames of ``tb`` (cells, and the user's files they call, not IPython's
    or dpnb's), each as where and its source line, then ``Name: message``."""
    lines, in_user_code = [], False
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        label = shell.compile.format_code_name(filename)
        in_user_code = in_user_code or label is not None
        if in_user_code and not os.path.abspath(filename).startswith(DPNB + os.sep):
            where = (f"{label[0]} {label[1]}, line {tb.tb_lineno}" if label is not None else
                     f"File {filename}:{tb.tb_lineno}, in {tb.tb_frame.f_code.co_name}")
            lines += [where, f"----> {linecache.getline(filename, tb.tb_lineno).strip()}"]
        tb = tb.tb_next
    lines.append(f"{etype.__name__}: {value}")
    return lines


def _show_briefly(shell, etype, value, tb, tb_offset=None):
    stb = brief_traceback(shell, etype, value, tb)
    # IPython's protocol for exceptions that render their own traceback: showtraceback
    # displays it through the shell's hook (ipykernel's sends it to the notebook and
    # keeps it as the traceback of the execute reply that ipyparallel shows)
    value._render_traceback_ = lambda: stb
    shell.showtraceback((etype, value, tb))
    return stb


def install(shell) -> None:
    """Show dpnb's communicator errors briefly in ``shell`` (an engine's IPython shell)."""
    shell.set_custom_exc(BRIEF, _show_briefly)
