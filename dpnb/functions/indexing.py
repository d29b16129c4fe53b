"""Gathering and scattering by index: gather, gather_nd, scatter_nd, scatter_add, one_hot, embed."""
from __future__ import annotations

__all__: list[str] = []
