"""Recurrent networks as single functions: rnn, lstm and gru (multi-layer, bidirectional)."""
from __future__ import annotations

__all__: list[str] = []
