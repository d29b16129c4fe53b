"""loss functions."""
__all__: list[str] = []
