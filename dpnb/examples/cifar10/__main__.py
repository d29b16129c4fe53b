"""``python -m dpnb.examples.cifar10``: the example's command line."""
import sys

from .multi_device_multi_process_classification import main

sys.argv[0] = "python -m dpnb.examples.cifar10"   # as help and errors name the program
main()
