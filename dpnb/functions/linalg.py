"""Batched linear algebra: batch_inv, batch_det, batch_logdet and batch_cholesky."""
from __future__ import annotations

__all__: list[str] = []
