"""nnabla's ``nnabla.config.nnabla_config``: the settings of nnabla.conf, as a
``configparser.RawConfigParser`` holding nnabla 1.39's defaults overridden by the
files ``logger.config_files()`` lists (``/etc/nnabla.conf``, ``~/.nnabla``,
``./nnabla.conf``, ``$NNABLA_CONFIG_FILE_PATH``).  Programs read and set it as
under nnabla; the data sources read their cache settings from it."""
from __future__ import annotations

import configparser

from .logger import config_files

__all__ = ["nnabla_config"]

DEFAULTS = {
    "DATA_ITERATOR": {
        "cache_file_format": ".npy",
        "data_source_file_cache_num_of_threads": "10",
        "cache_file_cache_num_of_threads": "4",
        "data_source_file_cache_size": "100",
        "data_source_file_cache_location": "",
        "data_source_buffer_max_size": "1073741824",
    },
    "LOG": {
        "log_file_name": "",
        "log_file_level": "DEBUG",
        "log_file_format": ("%(asctime)s [%(name)s][%(levelname)s]: %(pathname)s : "
                            "%(funcName)s : %(lineno)s : %(message)s"),
        "log_console_level": "INFO",
        "log_console_format": "%(asctime)s [%(name)s][%(levelname)s]: %(message)s",
    },
    "MISC": {"misc_show_progress": "True", "nnp_param_format": ".h5"},
    "CALLBACK": {"util_callback_module": ""},
    "CHECKPOINT": {"optimizer_interval": "5"},
    "MULTINODE": {
        "analyse_gpu_status_interval": "20",
        "gpu_slowing_warning_threshold": "2",
        "gpu_slowing_error_threshold": "10",
    },
}
"""The settings of the nnabla.conf that nnabla 1.39 ships, read before any file."""


def read_config(files: list[str]) -> configparser.RawConfigParser:
    """nnabla's defaults overridden by those of the existing ``files``, later ones
    overriding earlier ones."""
    parser = configparser.RawConfigParser()
    parser.read_dict(DEFAULTS)
    parser.read(files)
    return parser


nnabla_config = read_config(config_files())
