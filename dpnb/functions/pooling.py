"""pooling functions."""
__all__: list[str] = []
