"""stochastic functions."""
__all__: list[str] = []
