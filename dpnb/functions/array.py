"""array functions."""
__all__: list[str] = []
