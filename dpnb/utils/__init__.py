"""nnabla's ``nnabla.utils`` modules that training programs import: data sources,
data iterators, downloads and communicator helpers."""
