"""Plain values to and from nnabla's protobuf messages: a ``*_param`` message as a dict
and back, a ``Network`` of its parts, and the names nnabla gives things in a network
file (``Type``, ``Type_1`` ...); shared by the writers and readers of network files and
by ``nn.graph_def``."""
from __future__ import annotations

from . import nnabla_pb2
from .proto_classes import is_repeated


def unique_name(counts: dict[str, int], prefix: str) -> str:
    """``prefix`` the first time, then ``prefix_1``, ``prefix_2`` ... as nnabla names things."""
    if prefix not in counts:
        counts[prefix] = 1
        return prefix
    name = f"{prefix}_{counts[prefix]}"
    counts[prefix] += 1
    return name


def fill_message(message, values: dict) -> None:
    """Set the fields of a ``*_param`` message from a dict (lists go to Shape.dim or to
    repeated fields; dicts to sub-messages)."""
    message.SetInParent()
    for name, value in values.items():
        field = message.DESCRIPTOR.fields_by_name[name]
        if field.message_type is not None and isinstance(value, dict):
            fill_message(getattr(message, name), value)
        elif field.message_type is not None:
            getattr(message, name).dim.extend(int(v) for v in value)
        elif isinstance(value, list):
            getattr(message, name).extend(value)
        else:
            setattr(message, name, value)


def message_to_dict(message) -> dict:
    """A ``*_param`` message as a dict of plain values (Shape as a list of ints)."""
    values = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.name == "Shape":
            values[field.name] = [int(d) for d in value.dim]
        elif field.message_type is not None:
            values[field.name] = message_to_dict(value)
        elif is_repeated(field):
            values[field.name] = list(value)
        else:
            values[field.name] = value
    return values


def network_message(name: str, batch_size: int | None, variables, functions):
    """nnabla's ``Network`` message of its ``Variable`` and ``Function`` messages."""
    message = nnabla_pb2.Network()
    if batch_size:
        message.batch_size = int(batch_size)
    message.name = name
    message.variable.extend(variables)
    message.function.extend(functions)
    return message
