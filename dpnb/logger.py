"""nnabla's ``logger``: the logger named "nnabla" that nnabla programs write to.

It prints ``<time> [nnabla][INFO]: <message>`` to standard error, as nnabla's
default configuration does, and reads the ``[LOG]`` section of the same
``nnabla.conf`` files.  Unlike nnabla it leaves the root logger alone: the
handlers sit on this logger, which does not propagate."""
from __future__ import annotations

import configparser
import logging
import os
import sys

from .errors import DpnbError

__all__ = ["logger"]

# nnabla 1.39's defaults for the [LOG] section of nnabla.conf.
_DEFAULTS = {
    "log_console_level": "INFO",
    "log_console_format": "%(asctime)s [%(name)s][%(levelname)s]: %(message)s",
    "log_file_name": "",
    "log_file_level": "DEBUG",
    "log_file_format": ("%(asctime)s [%(name)s][%(levelname)s]: %(pathname)s : "
                        "%(funcName)s : %(lineno)s : %(message)s"),
}
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def config_files() -> list[str]:
    """The files nnabla reads its configuration from, later ones overriding earlier ones."""
    files = ["/etc/nnabla.conf", os.path.join(os.path.expanduser("~"), ".nnabla"),
             os.path.join(os.getcwd(), "nnabla.conf")]
    extra = os.environ.get("NNABLA_CONFIG_FILE_PATH")
    if extra:
        files.append(extra)
    return files


def read_log_settings(files: list[str]) -> dict[str, str]:
    """nnabla's ``[LOG]`` settings: its defaults, overridden by those of the existing ``files``."""
    parser = configparser.RawConfigParser()
    parser.read(files)
    settings = dict(_DEFAULTS)
    if parser.has_section("LOG"):
        settings.update({key: parser.get("LOG", key) for key in _DEFAULTS
                         if parser.has_option("LOG", key)})
    return settings


def _level(settings: dict[str, str], key: str) -> int:
    name = settings[key].strip().upper()
    if name not in _LEVELS:
        raise DpnbError(f"the {key} of nnabla.conf's [LOG] section must be one of "
                        f"{', '.join(_LEVELS)}; got {settings[key]!r}. Fix it in one of "
                        f"{config_files()}")
    return getattr(logging, name)


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is when a record comes, so that Jupyter's
    and ipyparallel's replacement streams receive the messages."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


def configure(target: logging.Logger, settings: dict[str, str]) -> logging.Logger:
    """Give ``target`` nnabla's console (and optional file) output for ``settings``.

    As in nnabla, the console level is the logger's level, so the file never
    receives messages below it even where its own level is lower."""
    target.setLevel(_level(settings, "log_console_level"))
    target.propagate = False
    console = _StderrHandler()
    console.setFormatter(logging.Formatter(settings["log_console_format"]))
    target.addHandler(console)
    if settings["log_file_name"]:
        file_handler = logging.FileHandler(settings["log_file_name"])
        file_handler.setLevel(_level(settings, "log_file_level"))
        file_handler.setFormatter(logging.Formatter(settings["log_file_format"]))
        target.addHandler(file_handler)
    return target


logger = configure(logging.getLogger("nnabla"), read_log_settings(config_files()))
