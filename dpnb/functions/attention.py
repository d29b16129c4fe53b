"""Attention: multi_head_attention."""
from __future__ import annotations

__all__: list[str] = []
