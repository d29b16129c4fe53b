"""nnabla's ``get_extension_context``."""
from .context import Context, make_context


def get_extension_context(ext_name: str = "cpu", device_id: int | str = 0,
                          type_config: str = "float") -> Context:
    """Context for "cpu" (NumPy), "cuda" or "cudnn" (CuPy on ``device_id``).

    A GPU context on a machine without CuPy or a GPU raises ``DpnbError``
    saying so; there is no silent fallback to the CPU."""
    return make_context(ext_name, device_id, type_config)
