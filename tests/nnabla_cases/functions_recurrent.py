"""Recurrent cases (see functions.py): F.rnn, F.lstm and F.gru option by option (layers,
directions, bias, nonlinearity, zero or given initial states, training=False), the
PF layers that own their weights, PF.lstm_cell and PF.LSTMCell.  Sizes are tiny
(T=3, B=2, I=3, H=2) so that finite differences stay cheap."""
import numpy as np

from .functions import Case

R = np.random.RandomState(11)
T, B, I, H = 3, 2, 3, 2


def u(*shape, low=-1.0, high=1.0):
    """Uniform float32 inputs."""
    return R.uniform(low, high, shape).astype(np.float32)


def state(layers, directions):
    return u(layers, directions, B, H)


def zeros(layers, directions):
    return np.zeros((layers, directions, B, H), np.float32)


def weights(gates, layers, directions):
    """weight_l0 and (for two layers) weight for ``gates`` gate blocks (None: RNN's
    block-less layout)."""
    g = () if gates is None else (gates,)
    w0 = u(*((directions,) + g + (H, I + H)))
    if layers == 1:
        return (w0,)
    return (w0, u(*((layers - 1, directions) + g + (H, directions * H + H))))


def bias(gates, layers, directions):
    g = () if gates is None else (gates,)
    return (u(*((layers, directions) + g + (H,))),)


def f_cases(fn, gates, bias_gates, cell):
    """The options of one of F.rnn / F.lstm / F.gru."""
    cases = []
    options = [("", 1, False, True), (" no bias", 1, False, False),
               (" 2 layers", 2, False, True), (" bidirectional", 1, True, True),
               (" 2 layers bidirectional", 2, True, True),
               (" 2 layers bidirectional no bias", 2, True, False)]
    for label, layers, bidirectional, with_bias in options:
        d = 2 if bidirectional else 1
        arrays = (u(T, B, I), state(layers, d)) + ((state(layers, d),) if cell else ())
        arrays += weights(gates, layers, d) + (bias(bias_gates, layers, d) if with_bias else ())
        cases.append(Case(f"F.{fn}{label}", _f_build(fn, cell, layers, bidirectional, with_bias),
                          arrays))
    d = 1
    arrays = (u(T, B, I), zeros(1, d)) + ((zeros(1, d),) if cell else ())
    arrays += weights(gates, 1, d) + bias(bias_gates, 1, d)
    cases.append(Case(f"F.{fn} zero initial state", _f_build(fn, cell, 1, False, True), arrays))
    cases.append(Case(f"F.{fn} training=False (no backward)",
                      _f_build(fn, cell, 1, False, True, training=False), arrays, grad=False))
    cases.append(Case(f"F.{fn} dropout ignored without training",
                      _f_build(fn, cell, 2, False, True, training=False, dropout=0.5),
                      (u(T, B, I), state(2, 1)) + ((state(2, 1),) if cell else ())
                      + weights(gates, 2, 1) + bias(bias_gates, 2, 1), grad=False))
    return cases


def _f_build(fn, cell, layers, bidirectional, with_bias, **options):
    def build(lib, x, h, *rest):
        f = getattr(lib.F, fn)
        states = (h,)
        if cell:
            states, rest = (h, rest[0]), rest[1:]
        w0 = rest[0]
        w = rest[1] if layers > 1 else None
        b = rest[-1] if with_bias else None
        return f(x, *states, w0, w, b, num_layers=layers, bidirectional=bidirectional,
                 **options)
    return build


def relu_case(label, layers, bidirectional, with_bias):
    d = 2 if bidirectional else 1
    arrays = (u(T, B, I), state(layers, d)) + weights(None, layers, d)
    arrays += bias(None, layers, d) if with_bias else ()

    def build(lib, x, h, *rest):
        w = rest[1] if layers > 1 else None
        b = rest[-1] if with_bias else None
        return lib.F.rnn(x, h, rest[0], w, b, num_layers=layers, nonlinearity="relu",
                         bidirectional=bidirectional)
    return Case(f"F.rnn relu{label}", build, arrays)


def pf_case(fn, label, layers, bidirectional, cell, fd=True, **options):
    d = 2 if bidirectional else 1
    arrays = (u(T, B, I), state(layers, d)) + ((state(layers, d),) if cell else ())

    def build(lib, x, *states):
        return getattr(lib.PF, fn)(x, *states, num_layers=layers, bidirectional=bidirectional,
                                   **options)
    return Case(f"PF.{fn}{label}", build, arrays, fd=fd)


def pf_cases(fn, cell):
    return [pf_case(fn, "", 1, False, cell),
            pf_case(fn, " 2 layers bidirectional", 2, True, cell),
            pf_case(fn, " no bias", 2, False, cell, with_bias=False),
            # Fixed parameters get no gradient (nnabla records zeros): no finite differences.
            pf_case(fn, " fix_parameters", 1, True, cell, fd=False, fix_parameters=True),
            pf_case(fn, " named", 1, False, cell, name="enc")]


def lstm_cell(lib, x, h, c):
    return lib.PF.lstm_cell(x, h, c, H)


def lstm_cell_named(lib, x, h, c):
    return lib.PF.lstm_cell(x, h, c, H, name="cell", fix_parameters=True)


def lstm_cell_class(lib, x0, x1):
    cell = lib.PF.LSTMCell(B, H, name="cell")
    cell(x0)
    return cell(x1), cell.c


def lstm_cell_class_states(lib, x0, h, c):
    cell = lib.PF.LSTMCell(B, H, h=h, c=c)
    return cell(x0), cell.c


def distinct_sizes_case(fn, gates, bias_gates, cell):
    """Two bidirectional layers with T, B, I, H and D all different (5, 3, 4, 6, 2), so
    that no axis can stand in for another."""
    t, b, i, h, d = 5, 3, 4, 6, 2
    g = () if gates is None else (gates,)
    bg = () if bias_gates is None else (bias_gates,)
    arrays = (u(t, b, i), u(2, d, b, h)) + ((u(2, d, b, h),) if cell else ())
    arrays += (u(*((d,) + g + (h, i + h))), u(*((1, d) + g + (h, d * h + h))),
               u(*((2, d) + bg + (h,))))
    return Case(f"F.{fn} distinct sizes", _f_build(fn, cell, 2, True, True), arrays)


CASES = (
    f_cases("rnn", None, None, False)
    + [relu_case("", 1, False, True), relu_case(" 2 layers bidirectional", 2, True, True),
       relu_case(" no bias", 1, False, False)]
    + f_cases("lstm", 4, 4, True)
    + f_cases("gru", 3, 4, False)
    + pf_cases("rnn", False) + [pf_case("rnn", " relu", 1, False, False, nonlinearity="relu")]
    + pf_cases("lstm", True) + pf_cases("gru", False)
    + [Case("PF.lstm_cell", lstm_cell, (u(B, I), u(B, H), u(B, H))),
       Case("PF.lstm_cell named fix_parameters", lstm_cell_named, (u(B, I), u(B, H), u(B, H)),
            fd=False),  # fixed parameters: zero gradients, unlike their finite differences
       Case("PF.LSTMCell two steps from zero", lstm_cell_class, (u(B, I), u(B, I))),
       Case("PF.LSTMCell given states", lstm_cell_class_states, (u(B, I), u(B, H), u(B, H)))]
    + [distinct_sizes_case("rnn", None, None, False), distinct_sizes_case("lstm", 4, 4, True),
       distinct_sizes_case("gru", 3, 4, False)]
)
