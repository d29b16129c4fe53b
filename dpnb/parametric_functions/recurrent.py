"""Recurrent layers: PF.rnn, PF.lstm, PF.gru and the LSTM cell, with nnabla's parameter names."""
from __future__ import annotations

__all__: list[str] = []
