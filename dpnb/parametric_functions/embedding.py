"""The embedding layer: PF.embed and its lookup table."""
from __future__ import annotations

__all__: list[str] = []
