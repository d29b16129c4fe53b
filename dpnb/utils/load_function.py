"""nnabla's ``nnabla.utils.load_function``: turn a function of nnabla's network format
(a ``Function`` message) into a callable that adds that function to a dpnb graph; the
work is dpnb.formats.function_messages'."""
from ..formats.function_messages import FunctionInstance, create_function_instance, function_instance
from ..formats.messages import message_to_dict

_create_function_instance = create_function_instance  # nnabla's name

__all__ = ["FunctionInstance", "function_instance", "message_to_dict"]
