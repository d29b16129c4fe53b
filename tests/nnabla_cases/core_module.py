"""nnabla.core cases run with nnabla (record_core_module.py records them into
core_module.json) and with dpnb (test_core_module.py compares): modules, nn.Sequential and
the networks nn.graph_def defines.  Each takes the library's modules (``modules`` is
``nnabla.core.modules``)."""
from google.protobuf import text_format


def module_classes(nn, F, modules):
    """The cases' modules on the library's nn.Module: TwoBranches (two ConvBn branches,
    concatenated) and Shared (one ResUnit held under two names)."""

    class TwoBranches(nn.Module):
        def __init__(self):
            self.conv_bn_1 = modules.ConvBn(2)
            self.conv_bn_2 = modules.ConvBn(2, kernel=3, act=F.relu)

        def call(self, x1, x2):
            return F.concatenate(self.conv_bn_1(x1), self.conv_bn_2(x2), axis=1)

    class Shared(nn.Module):
        def __init__(self):
            self.unit = modules.ResUnit(8)
            self.again = self.unit

        def call(self, x):
            return self.again(self.unit(x))

    return TwoBranches, Shared


def shapes(params: dict) -> list:
    """Each parameter's name, shape and need_grad."""
    return [[name, list(p.shape), bool(p.need_grad)] for name, p in params.items()]


def text(message) -> str:
    """A protobuf message as nnabla's text format."""
    return text_format.MessageToString(message)


def two_branches_graph(nn, two_branches_class):
    """A TwoBranches called on ProtoVariables: the module, the network it defined, and
    what they name (networks, inputs, outputs, parameters, paths)."""
    m = two_branches_class()
    y = m(nn.ProtoVariable((2, 3, 5, 5)), nn.ProtoVariable((2, 3, 5, 5)))
    net = nn.graph_def.get_default_graph_by_variable(y)
    return m, net, {
        "networks": list(nn.graph_def.get_default_graph().networks),
        "network": net.name, "inputs": net.inputs, "outputs": net.outputs,
        "output": y.name, "output_shape": list(y.shape),
        "parameters": shapes(m.get_parameters()),
        "grad_parameters": list(m.get_parameters(grad_only=True)),
        "conv_bn_1": list(m.conv_bn_1.get_parameters()),
        "path": m.conv_bn_2.get_path_name(), "scope_name": m.get_scope_name()}


def training_flags(m) -> list:
    """A Shared module's training flag and its submodules' after it is turned off."""
    m.training = False
    return [m.training, m.unit.training, m.unit.conv1.training]


def flat_graph(nn, F, PF):
    """A network of functions and operators on ProtoVariables, in a graph named "flat"."""
    with nn.graph_def.graph(name="flat") as g:
        a = nn.ProtoVariable((2, 3, 4, 4), name="a")
        b = nn.ProtoVariable((2, 3, 4, 4))
        h = PF.convolution(a, 4, (3, 3), pad=(1, 1), name="c1")
        h2 = PF.convolution(b, 4, (3, 3), pad=(1, 1), name="c2")
        y = F.relu(h + h2) * 2.0 - 1.0
        y = F.reshape(y, (2, -1))
        y = -PF.affine(y, 5, name="fc") / 3.0
    return g


def from_variable_graph(nn, F, PF):
    """A two-output graph of variables converted by create_graph_from_variable: its
    input and the graph."""
    x = nn.Variable((1, 6), need_grad=True)
    h = F.tanh(PF.affine(x, 4, name="affine2"))
    y0, y1 = PF.affine(h, 3, name="y0"), PF.affine(h, 2, name="y1")
    return x, nn.graph_def.create_graph_from_variable("my_model", [y0, y1],
                                                      names={"x": x, "y_0": y0, "y_1": y1})


def renamed(rename_variable, net) -> dict:
    """The converted network's outputs, variables and output producers after its outputs
    are renamed."""
    rename_variable(net, {"y_0": "first", "y_1": "second"})
    return {"outputs": net.outputs, "variables": list(net.variables),
            "parent_outputs": [net.functions[net.variables[k].parent].outputs
                               for k in net.outputs]}


def sequential(nn, F, modules) -> dict:
    """An nn.Sequential of three ConvBn (one named): its layers' names, its parameters and
    its output shape."""
    seq = nn.Sequential(modules.ConvBn(2), ("named", modules.ConvBn(3, act=F.relu)),
                        modules.ConvBn(1))
    y = seq(nn.Variable((1, 2, 3, 3)))
    return {"submodules": list(seq.submodules), "parameters": shapes(seq.get_parameters()),
            "output_shape": list(y.shape)}
