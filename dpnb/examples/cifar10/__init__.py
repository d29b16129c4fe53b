"""nnabla-examples' data-parallel CIFAR-10 classification on dpnb.

``main(argv)`` takes the options of the command line (``python -m
dpnb.examples.cifar10 --help``), so notebooks call it on every engine;
``SCRIPT`` and ``LAUNCHER`` are the program and its ``mpiexec`` launcher."""
from pathlib import Path

from .multi_device_multi_process_classification import main, parse_args

SCRIPT = Path(__file__).with_name("multi_device_multi_process_classification.py")
LAUNCHER = Path(__file__).with_name("multi_device_multi_process_classification.sh")

__all__ = ["LAUNCHER", "SCRIPT", "main", "parse_args"]
