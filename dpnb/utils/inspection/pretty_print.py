"""nnabla's ``pprint``: print each function of a graph (name, depth, arguments, input and
output shapes, which inputs take gradients, optionally statistics of their values)."""
from __future__ import annotations

import numpy as np

from ...graph import Function, Variable
from ...parameter import get_parameters

_STATISTICS = (("Med", np.median), ("Ave", np.mean), ("Std", np.std), ("Min", np.min),
               ("Max", np.max))


def _values(values) -> str:
    """A list of NumPy scalars as nnabla's output shows it (``[1.5, 0.25]``)."""
    return "[" + ", ".join(str(v) for v in values) + "]"


class PrettyPrinter:
    """The callback ``pprint`` visits a graph with: prints one function per call.

    ``functions`` collects ``dict(name=..., inputs=[...], outputs=[...])`` for each
    function when ``hidden`` is True."""

    def __init__(self, summary: bool = False, hidden: bool = False):
        self._summary = summary
        self._hidden = hidden
        self.functions: list[dict] = []
        self._scopes = {v: name.rpartition("/")[0] for name, v in get_parameters().items()}

    def get_scope_name(self, x: Variable) -> str | None:
        """The parameter scope of ``x`` if it is a registered parameter, else None."""
        return self._scopes.get(x)

    def __call__(self, f: Function) -> None:
        scope = self.get_scope_name(f.inputs[1]) if len(f.inputs) > 1 else None
        name = f"{f.name}({f.info.type_name})"
        if scope:
            name = f"{scope}/{name}"
        print(name)
        print(f"\tDepth = {f.rank}")
        print("\tArgs:", [f"{k}={v}" for k, v in f.info.args.items()])
        print("\tInputs:", [x.shape for x in f.inputs])
        print("\tOutputs:", [y.shape for y in f.outputs])
        print("\tBackward Inputs:", [x.need_grad for x in f.inputs])
        if self._summary:
            for title, variables, field in (("Input Data", f.inputs, "d"),
                                            ("Output Data", f.outputs, "d"),
                                            ("Input Grads", f.inputs, "g"),
                                            ("Output Grads", f.outputs, "g")):
                print(f"\t{title}:")
                arrays = [np.asarray(getattr(v, field)) for v in variables]
                for label, statistic in _STATISTICS:
                    print(f"\t\t{label}: ", _values(statistic(a) for a in arrays))
        if self._hidden:
            self.functions.append(dict(name=name, inputs=list(f.inputs), outputs=list(f.outputs)))


def pprint(v: Variable, forward: bool = False, backward: bool = False, summary: bool = False,
           hidden: bool = False, printer: bool = False) -> PrettyPrinter | None:
    """Print every function of the graph of ``v``, after ``v.forward()`` and
    ``v.backward()`` where asked; ``summary`` adds the median, mean, standard deviation,
    minimum and maximum of each input's and output's data and gradient, ``hidden``
    keeps the functions' variables in the printer, which ``printer`` returns."""
    if forward:
        v.forward()
    if backward:
        v.backward()
    pretty = PrettyPrinter(summary, hidden)
    v.visit(pretty)
    return pretty if printer else None
