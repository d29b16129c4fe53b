"""nnabla's ``nnabla.testing.clear_called_flag_recorder``: while active, the graph passes
record which arrays they released, function by function (``dpnb.graph.ClearFlags``)."""
from ..graph import ClearFlags, record_clear_flags

_record: ClearFlags | None = None


def activate_clear_called_flag_recorder() -> None:
    """Start recording, forgetting what an earlier recording held."""
    global _record
    _record = ClearFlags()
    record_clear_flags(_record)


def deactivate_clear_called_flag_recorder() -> None:
    global _record
    record_clear_flags(None)
    _record = None


def _active() -> ClearFlags:
    if _record is None:
        raise RuntimeError("the clear_called flag recorder is not active; call "
                           "activate_clear_called_flag_recorder() before the passes to record")
    return _record


def get_input_clear_called_flags() -> list[list[tuple[bool, bool]]]:
    """Per function forward ran, in order: its inputs' (data, grad) clear_called flags."""
    return _active().inputs


def get_output_clear_called_flags() -> list[list[tuple[bool, bool]]]:
    """Per function backward ran, in order: its outputs' (data, grad) clear_called flags."""
    return _active().outputs
