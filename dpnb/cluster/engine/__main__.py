"""``python -m dpnb.cluster.engine [ipengine options]``: one MPI rank, one engine."""
from .start import main

main()
