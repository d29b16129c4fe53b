"""Example programs that ship with dpnb, importable and runnable with ``python -m``."""
