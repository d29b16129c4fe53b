"""nnabla's ``nnabla.contrib``: the deprecated helpers that old nnabla programs and
tests still import (``contrib.context.extension_context``)."""
