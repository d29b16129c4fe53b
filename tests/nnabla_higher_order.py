"""Two higher-order-gradient training steps written once, in nnabla's idiom, and run
both by the real nnabla (tests/fixtures/nnabla/record_higher_order.py records what it
computes) and by dpnb standing in for it (tests/test_higher_order_nnabla.py and
tests/mpi_scripts/higher_order_nnabla.py, after ``dpnb.use_as_nnabla()``), so the
fixture shows that the same code gives the same numbers on both.

* ``wgan_gp_loss``: a WGAN-GP critic loss, a convolutional critic, the gradient penalty
  ``LAMBDA * (||d critic(x_hat) / d x_hat|| - 1) ** 2`` built with ``nn.grad``;
* ``maml_loss``: a MAML meta-batch, per task one inner gradient step (``nn.grad`` of the
  support loss w.r.t. the parameters, adapted parameters ``p - INNER_LR * g`` as a graph)
  and the query loss of the adapted parameters; its backward is second order.

Every loss is a mean over the samples (WGAN-GP) or the tasks (MAML) it is given, so on
R ranks with equal shares the mean of the ranks' gradients is the whole batch's.
"""
import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np

IMAGE = (1, 6, 6)          # WGAN-GP samples: one channel, 6 x 6
BATCH = 8                  # WGAN-GP samples per step (all ranks together)
LAMBDA = 10.0              # gradient-penalty weight
ADAM = dict(alpha=1e-3, beta1=0.5, beta2=0.9)   # WGAN-GP's critic solver

TASKS, SUPPORT, QUERY, FEATURES, HIDDEN = 4, 6, 5, 2, 8   # MAML meta-batch
INNER_LR = 0.1             # MAML inner (adaptation) step
OUTER_LR = 0.05            # MAML outer step (Sgd)


def bias():
    """Nonzero initial biases, so that every term through them counts."""
    return I.UniformInitializer((-0.3, 0.3))


def wgan_gp_inputs(seed: int = 7) -> dict:
    """Real and fake samples and the mixing weights of one critic step, float32."""
    r = np.random.RandomState(seed)
    return {"real": r.randn(BATCH, *IMAGE).astype(np.float32),
            "fake": (0.5 * r.randn(BATCH, *IMAGE) + 0.3).astype(np.float32),
            "alpha": r.rand(BATCH, 1, 1, 1).astype(np.float32)}


def critic(x):
    """Convolution, leaky ReLU, affine, tanh, affine: one score per sample."""
    with nn.parameter_scope("critic"):
        h = F.leaky_relu(PF.convolution(x, 3, (3, 3), pad=(1, 1), stride=(2, 2), name="conv",
                                       b_init=bias()),
                         alpha=0.2)
        h = F.tanh(PF.affine(h, 6, name="fc1", b_init=bias()))
        return PF.affine(h, 1, name="fc2", b_init=bias())


def wgan_gp_loss(real, fake, alpha):
    """The critic's loss on the given samples (NumPy arrays): mean score of the fakes
    minus that of the reals, plus the gradient penalty at x_hat = alpha * real +
    (1 - alpha) * fake; the loss and its parts, as Variables."""
    real = nn.Variable.from_numpy_array(real)
    fake = nn.Variable.from_numpy_array(fake)
    alpha = nn.Variable.from_numpy_array(alpha)
    x_hat = alpha * real + (1 - alpha) * fake
    x_hat.need_grad = True
    (grad_x,) = nn.grad([critic(x_hat)], [x_hat])
    norm = F.sum(grad_x ** 2, axis=[1, 2, 3]) ** 0.5
    penalty = LAMBDA * F.mean((norm - 1) ** 2)
    distance = F.mean(critic(fake)) - F.mean(critic(real))
    return distance + penalty, {"distance": distance, "penalty": penalty, "norm": norm}


def maml_inputs(seed: int = 11) -> dict:
    """A meta-batch of sine-like regression tasks: support and query sets, float32."""
    r = np.random.RandomState(seed)
    amplitude = r.uniform(0.5, 2.0, (TASKS, 1, 1))
    phase = r.uniform(0, np.pi, (TASKS, 1, 1))

    def sample(n):
        x = r.uniform(-2, 2, (TASKS, n, FEATURES))
        y = amplitude * np.sin(x.sum(axis=2, keepdims=True) + phase)
        return x.astype(np.float32), y.astype(np.float32)

    xs, ys = sample(SUPPORT)
    xq, yq = sample(QUERY)
    return {"support_x": xs, "support_y": ys, "query_x": xq, "query_y": yq}


def maml_parameters() -> dict:
    """The regressor's parameters (made by PF.affine under scope "maml"), by name."""
    with nn.parameter_scope("maml"):
        h = F.tanh(PF.affine(nn.Variable((1, FEATURES)), HIDDEN, name="fc1", b_init=bias()))
        PF.affine(h, 1, name="fc2", b_init=bias())
        return nn.get_parameters()


def regressor(x, p: dict):
    """The regressor with explicit parameters ``p`` (the model's or adapted ones)."""
    h = F.tanh(F.affine(x, p["fc1/affine/W"], p["fc1/affine/b"]))
    return F.affine(h, p["fc2/affine/W"], p["fc2/affine/b"])


def maml_loss(support_x, support_y, query_x, query_y):
    """The outer loss of the given tasks (NumPy arrays, tasks first): the mean over tasks
    of the query loss after one inner step on the task's support set; with the inner
    losses (one per task), as Variables."""
    params = maml_parameters()
    inner_losses, outer_losses = [], []
    for t in range(len(support_x)):
        inner = F.mean(F.squared_error(regressor(nn.Variable.from_numpy_array(support_x[t]),
                                                 params),
                                       nn.Variable.from_numpy_array(support_y[t])))
        grads = nn.grad([inner], list(params.values()))
        adapted = {k: p - INNER_LR * g for (k, p), g in zip(params.items(), grads)}
        outer = F.mean(F.squared_error(regressor(nn.Variable.from_numpy_array(query_x[t]),
                                                 adapted),
                                       nn.Variable.from_numpy_array(query_y[t])))
        inner_losses.append(inner)
        outer_losses.append(outer)
    total = outer_losses[0]
    for outer in outer_losses[1:]:
        total = total + outer
    return total / len(outer_losses), inner_losses


def set_parameters(values: dict, scope: str) -> dict:
    """Give the parameters under ``scope`` the recorded ``values`` (name -> array)."""
    with nn.parameter_scope(scope):
        params = nn.get_parameters()
    assert sorted(params) == sorted(values), (sorted(params), sorted(values))
    for k, p in params.items():
        p.d = values[k]
    return params


def wgan_gp_solver(params: dict):
    """Adam, as WGAN-GP trains its critic, over ``params``."""
    solver = S.Adam(**ADAM)
    solver.set_parameters(params)
    return solver


def maml_solver(params: dict):
    """Plain SGD for the outer step: the update is proportional to the gradient."""
    solver = S.Sgd(lr=OUTER_LR)
    solver.set_parameters(params)
    return solver


def step(loss, solver, params: dict, exchange=None) -> dict:
    """One training step: forward (which computes MAML's inner losses too: ``nn.grad``'s
    gradients start from them), zero_grad, backward, ``exchange()`` (the gradients'
    all_reduce on several ranks), update; the gradients the update used, by name."""
    loss.forward()
    solver.zero_grad()
    loss.backward()
    if exchange is not None:
        exchange()
    grads = {k: p.g.copy() for k, p in params.items()}
    solver.update()
    return grads
