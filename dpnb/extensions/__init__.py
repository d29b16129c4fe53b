"""nnabla's extension modules (``nnabla_ext.cpu``, ``nnabla_ext.cuda``,
``nnabla_ext.cudnn``): each gives ``context(...)`` and the device helpers.

``cpu`` always imports; ``cuda`` and ``cudnn`` import only where CuPy sees a
GPU, and raise an ImportError otherwise, as nnabla does where the extension is
not installed."""
