"""The default random generator: seeded the same in every process, so that the
same code creates the same initial parameters on every rank."""
import numpy as np

DEFAULT_SEED = 313

prng = np.random.RandomState(DEFAULT_SEED)
pseed = DEFAULT_SEED  # the seed prng was last given, as nnabla's ``random.pseed``


def seed(n: int) -> None:
    """Reseed the default generator (in place, so generators handed out earlier follow)."""
    global pseed
    prng.seed(n)
    pseed = n
