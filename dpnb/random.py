"""The default random generator: seeded the same in every process, so that the
same code creates the same initial parameters on every rank."""
import numpy as np

DEFAULT_SEED = 313

prng = np.random.RandomState(DEFAULT_SEED)


def seed(n: int) -> None:
    """Reseed the default generator (in place, so generators handed out earlier follow)."""
    prng.seed(n)
