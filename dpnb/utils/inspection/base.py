"""The interface of nnabla's function-hook callbacks: an object whose ``pre_hook`` and
``post_hook`` are callables given to ``forward``/``backward`` as function hooks."""


class FunctionHookCallbackBase:
    """A pair of function hooks; subclasses return the callables from the properties."""

    @property
    def pre_hook(self):
        """The callable to pass as ``function_pre_hook`` (called with each function)."""
        raise NotImplementedError(f"{type(self).__name__} does not define pre_hook")

    @property
    def post_hook(self):
        """The callable to pass as ``function_post_hook`` (called with each function)."""
        raise NotImplementedError(f"{type(self).__name__} does not define post_hook")
