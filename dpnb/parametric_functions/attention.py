"""Attention layers: PF.multi_head_attention and the transformer family."""
from __future__ import annotations

__all__: list[str] = []
