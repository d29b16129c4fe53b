"""normalization functions."""
__all__: list[str] = []
