"""Parametric activations: PF.prelu and its learned slopes."""
from __future__ import annotations

__all__: list[str] = []
