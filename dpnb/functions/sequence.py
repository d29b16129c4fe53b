"""Padded and packed sequences for the recurrent functions: pack_padded_sequence and pad_packed_sequence."""
from __future__ import annotations

__all__: list[str] = []
