"""dpnb installed beside the real nnabla 1.39 (Python 3.10, numpy 1.26, protobuf 3.20.3):
pip accepts the pair, nnabla keeps being nnabla, and dpnb's launcher and notebook helpers
serve programs that run the real nnabla on the engines.

A venv with ``nnabla==1.39.0`` and this checkout with its ``cluster`` and ``mpich``
extras, built in one pip call and cached at ``.venv-nnabla/`` (tests/cached_venv.py),
runs DRIVER: a 2-engine CPU cluster where every engine trains a small affine network with
the real nnabla on data of its own, averaging gradients over mpi4py (nnabla has no CPU
communicator), and feeding a MonitorSeries. The driver prints what ``gather``,
``gather_grads``, ``compare``, ``check_sync`` and the progress monitor gave; this test
recomputes every value with NumPy."""
import json
import subprocess
import textwrap

import numpy as np
import pytest

from cached_venv import cached_venv, clean_env, python_of

STEPS, LR, BATCH, IN, OUT = 4, 0.1, 4, 3, 2
W0 = np.array([[0.5, -0.25], [0.125, 1.0], [-0.75, 0.375]])
B0 = np.array([0.25, -0.5])

ENGINE_CELL = f"""
import numpy as np
import nnabla as nn
import nnabla.functions as F
import nnabla.parametric_functions as PF
import nnabla.solvers as S
from mpi4py import MPI
from nnabla.monitor import Monitor, MonitorSeries

real = nn.__name__ == "nnabla" and not hasattr(nn, "use_as_nnabla")
nn.clear_parameters()
X = np.random.RandomState(rank).randn({STEPS + 1}, {BATCH}, {IN}).astype(np.float32)
T = np.random.RandomState(100 + rank).randn({STEPS + 1}, {BATCH}, {OUT}).astype(np.float32)
x, t = nn.Variable(({BATCH}, {IN})), nn.Variable(({BATCH}, {OUT}))
with nn.parameter_scope("fc"):
    y = PF.affine(x, {OUT})
loss = F.mean(F.squared_error(y, t))
params = nn.get_parameters()
params["fc/affine/W"].d = np.array({W0.tolist()})
params["fc/affine/b"].d = np.array({B0.tolist()})
solver = S.Sgd(lr={LR})
solver.set_parameters(params)

def average_gradients():
    for v in params.values():
        g = np.ascontiguousarray(v.g)
        MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, g)
        v.g = g / MPI.COMM_WORLD.Get_size()

def step(i):
    x.d, t.d = X[i], T[i]
    loss.forward()
    solver.zero_grad()
    loss.backward()

series = MonitorSeries("Training loss", Monitor(monitor_dir + "/rank" + str(rank)), verbose=False)
for i in range({STEPS}):
    step(i)
    average_gradients()
    solver.update()
    series.add(i + 1, float(loss.d))
"""

DRIVER = """
import json, sys, textwrap, time
import numpy as np
import dpnb
from dpnb.notebook import ProgressMonitor, check_sync, compare, gather, gather_grads

def tolist(per_rank):
    return {str(r): (v.tolist() if isinstance(v, np.ndarray) else
                     {k: a.tolist() for k, a in v.items()}) for r, v in per_rank.items()}

engine_cell, monitor_dir = sys.argv[1], sys.argv[2]
out = {}
cluster = dpnb.start(n=2, timeout=120, progress=False)
try:
    view = cluster.view
    view.push({"monitor_dir": monitor_dir}, block=True)
    monitor = ProgressMonitor(interval=0.05, display=False)
    monitor.start()
    try:
        monitor.watch(view.execute(engine_cell, block=False))
        deadline = time.monotonic() + 120
        while not monitor.runs and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        monitor.stop()
    out["runs"] = [{"steps": {str(r): s for r, s in run.steps.items()},
                    "losses": {str(r): l for r, l in run.losses.items()}} for run in monitor.runs]
    out["real"] = gather("real")
    out["module"] = gather("type(params['fc/affine/W']).__module__")
    out["x"] = tolist(gather("x"))
    out["loss"] = tolist(gather("loss.d"))
    sync = check_sync()
    out["in_sync"], out["checked"] = sync.in_sync, sync.checked
    view.execute("step(%d)" % int(sys.argv[3]), block=True)
    before = gather_grads()
    view.execute("average_gradients()", block=True)
    after = gather_grads()
    out["before"], out["after"] = tolist(before), tolist(after)
    comparison = compare(before, after)
    out["compare"] = [[r.stage, r.name, r.norms, r.max_difference, r.agree] for r in comparison.rows]
    out["agree"] = [comparison.agree("before"), comparison.agree("after")]
    view.execute("if rank == 1:\\n    params['fc/affine/b'].d += 1.0", block=True)
    sync = check_sync()
    out["differing"] = {name: tolist(values) for name, values in sync.differing.items()}
    out["after_checked"] = sync.checked
finally:
    cluster.stop()
print("RESULT " + json.dumps(out, default=lambda v: v.tolist() if hasattr(v, "tolist") else v))
"""


@pytest.fixture(scope="module")
def nnabla_venv():
    return cached_venv(".venv-nnabla", "3.10", ["nnabla==1.39.0"], extras="[cluster,mpich]")


def _run_python(venv, code: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([python_of(venv), "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=clean_env(), cwd="/", **kwargs)


@pytest.mark.timeout(1800)
def test_nnabla_stays_nnabla_beside_dpnb(nnabla_venv):
    got = _run_python(nnabla_venv, """
        import numpy, google.protobuf as pb, dpnb, nnabla
        import nnabla.functions as F
        import dpnb.formats.nnabla_pb2 as ours
        from nnabla.utils import nnabla_pb2 as theirs
        from dpnb.nnabla_alias import use_as_nnabla_unless_installed
        assert use_as_nnabla_unless_installed() is False
        import nnabla as again
        assert again is nnabla and nnabla.__name__ == "nnabla" and not hasattr(nnabla, "use_as_nnabla")
        assert F.__name__ == "nnabla.functions" and "site-packages/nnabla" in nnabla.__file__
        assert ours.NNablaProtoBuf is not theirs.NNablaProtoBuf
        x = nnabla.Variable.from_numpy_array(numpy.array([[-1.0, 2.0]]))
        y = F.relu(x)
        y.forward()
        print("RESULT", numpy.__version__, pb.__version__, nnabla.__version__, y.d.tolist())
    """, timeout=300)
    assert got.returncode == 0, got.stderr[-4000:]
    result = [line for line in got.stdout.splitlines() if line.startswith("RESULT ")]
    assert result == ["RESULT 1.26.4 3.20.3 1.39.0 [[0.0, 2.0]]"], got.stdout
    check = subprocess.run([python_of(nnabla_venv), "-m", "pip", "check"], capture_output=True,
                           text=True, env=clean_env())
    assert check.returncode == 0, check.stdout + check.stderr


def _reference():
    """Per rank: the inputs, the losses of every step, the parameters after STEPS steps
    of SGD on the mean gradient of both ranks, and the last step's gradients."""
    X = {r: np.random.RandomState(r).randn(STEPS + 1, BATCH, IN).astype(np.float32) for r in (0, 1)}
    T = {r: np.random.RandomState(100 + r).randn(STEPS + 1, BATCH, OUT).astype(np.float32)
         for r in (0, 1)}
    W, b = W0.copy(), B0.copy()

    def forward_backward(r, i):
        x, t = X[r][i].astype(np.float64), T[r][i].astype(np.float64)
        y = x @ W + b
        dy = 2 * (y - t) / y.size
        return np.mean((y - t) ** 2), x.T @ dy, dy.sum(axis=0)

    losses = {0: [], 1: []}
    for i in range(STEPS):
        results = {r: forward_backward(r, i) for r in (0, 1)}
        for r in (0, 1):
            losses[r].append((i + 1, results[r][0]))
        W -= LR * (results[0][1] + results[1][1]) / 2
        b -= LR * (results[0][2] + results[1][2]) / 2
    last = {r: forward_backward(r, STEPS) for r in (0, 1)}
    return X, losses, W, b, last


@pytest.mark.timeout(1800)
def test_helpers_serve_engines_that_run_the_real_nnabla(nnabla_venv, tmp_path, ipython_dir):
    env = clean_env()
    env["IPYTHONDIR"] = str(ipython_dir)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    done = subprocess.run([python_of(nnabla_venv), str(driver), ENGINE_CELL, str(tmp_path),
                           str(STEPS)], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, (done.stdout + done.stderr)[-6000:]
    out = json.loads(lines[-1][len("RESULT "):])
    X, losses, W, b, last = _reference()

    assert out["real"] == {"0": True, "1": True}
    assert set(out["module"].values()) == {"nnabla._variable"}
    # progress: MonitorSeries's losses reached the notebook's monitor, every step of each rank
    assert len(out["runs"]) == 1
    run = out["runs"][0]
    assert run["steps"] == {"0": STEPS, "1": STEPS}
    for r in (0, 1):
        assert [s for s, _ in run["losses"][str(r)]] == [s for s, _ in losses[r]]
        np.testing.assert_allclose([v for _, v in run["losses"][str(r)]],
                                   [v for _, v in losses[r]], rtol=1e-5)
    # gather: each rank's own Variable and loss
    for r in (0, 1):
        np.testing.assert_array_equal(np.array(out["x"][str(r)], np.float32), X[r][STEPS - 1])
        np.testing.assert_allclose(out["loss"][str(r)], losses[r][-1][1], rtol=1e-5)
    # check_sync: averaged gradients kept both ranks' parameters equal
    assert out["in_sync"] is True and out["checked"] == 2
    # gather_grads and compare: the last step's own gradients, then their mean
    names = ["fc/affine/W", "fc/affine/b"]
    for r in (0, 1):
        assert list(out["before"][str(r)]) == names
        np.testing.assert_allclose(out["before"][str(r)]["fc/affine/W"], last[r][1], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(out["before"][str(r)]["fc/affine/b"], last[r][2], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(out["after"][str(r)]["fc/affine/W"], (last[0][1] + last[1][1]) / 2,
                                   rtol=1e-4, atol=1e-6)
    assert out["agree"] == [False, True]
    rows = {(stage, name): (norms, diff, agree) for stage, name, norms, diff, agree in out["compare"]}
    norms, diff, agree = rows[("before", "fc/affine/W")]
    np.testing.assert_allclose(norms, [np.linalg.norm(last[r][1]) for r in (0, 1)], rtol=1e-4)
    np.testing.assert_allclose(diff, np.max(np.abs(last[1][1] - last[0][1])), rtol=1e-4)
    assert rows[("after", "fc/affine/b")][1:] == (0.0, True)
    # check_sync after rank 1 moved its bias: only that parameter, with both ranks' values
    assert out["after_checked"] == 2 and list(out["differing"]) == ["fc/affine/b"]
    np.testing.assert_allclose(out["differing"]["fc/affine/b"]["0"], b, rtol=1e-5)
    np.testing.assert_allclose(out["differing"]["fc/affine/b"]["1"], b + 1.0, rtol=1e-5)
