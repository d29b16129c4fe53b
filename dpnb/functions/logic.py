"""Comparisons and logic, elementwise: equal, greater, logical_and ... and where."""
from __future__ import annotations

__all__: list[str] = []
