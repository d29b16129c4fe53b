"""nn functions."""
__all__: list[str] = []
