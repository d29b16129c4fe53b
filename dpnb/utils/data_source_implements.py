"""nnabla's ``data_source_implements``, where nnabla keeps ``SimpleDataSource``:
the same class as ``dpnb.utils.data_source.SimpleDataSource``."""
from .data_source import SimpleDataSource

__all__ = ["SimpleDataSource"]
