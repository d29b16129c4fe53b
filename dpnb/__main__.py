"""``python -m dpnb ...``: the ``dpnb`` command, e.g. ``python -m dpnb run train.py``."""
import sys

from .cli import main

sys.exit(main())
