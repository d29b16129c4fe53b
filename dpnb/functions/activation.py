"""activation functions."""
__all__: list[str] = []
