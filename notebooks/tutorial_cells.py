"""The cells of the tutorial notebooks, English and Japanese side by side: (kind, en, ja[, tags])."""
CELLS = [
("md", r"""
# Data-parallel training with dpnb

Data-parallel training copies one network onto several devices, gives each copy a
different share of every mini-batch, and keeps the copies identical by averaging their
gradients before each update. This notebook walks through one such step on two MPI
ranks — one per GPU where there are GPUs, two CPU processes otherwise — and shows what
`all_reduce` does to the gradients, then trains for a few steps.
""", r"""
# dpnb によるデータ並列学習

データ並列学習では、同じネットワークを複数のデバイスに置き、ミニバッチをデバイスごとに分けて計算させます。各デバイスの勾配を平均してから更新するので、どのデバイスのネットワークも常に同じ重みを保ちます。このノートブックでは 2 つの MPI ランク（GPU があれば GPU ごとに 1 つ、なければ CPU のプロセス 2 つ）でこの 1 ステップを順に実行し、`all_reduce` が勾配をどう変えるかを確かめてから、数ステップ学習します。
"""),
("md", r"""
## Why averaging gradients is enough

Mini-batch SGD minimises the mean loss over a batch. Take a global batch of $B \times N$
points $X = \{\mathbf{x}_1, \dots, \mathbf{x}_{BN}\}$, where $N$ is the number of devices
and $B$ the number of points each device sees:

$$
L(\mathbf{w}) = \frac{1}{BN} \sum_{i=1}^{BN} \ell\big(f(\mathbf{x}_i; \mathbf{w}), y_i\big)
$$

Here $f$ is the network, $\mathbf{w}$ its trainable parameters and $\ell$ the loss of one
point. Differentiation is linear, so the gradient can be split by the device $n$ that holds
each point (its share of the batch is $X_n$, with $|X_n| = B$):

$$
\nabla_{\mathbf{w}} L
= \frac{1}{N} \sum_{n=1}^{N} \underbrace{\frac{1}{B} \sum_{\mathbf{x}_i \in X_n}
\nabla_{\mathbf{w}}\, \ell\big(f(\mathbf{x}_i; \mathbf{w}), y_i\big)}_{\mathbf{g}_n
\text{: computed on device } n}
$$

So each device computes $\mathbf{g}_n$, the mean gradient over its own $B$ points, with an
ordinary forward and backward pass; the devices then sum their $\mathbf{g}_n$ and divide by
$N$. That sum-and-divide is one collective, `comm.all_reduce(..., division=True)`. Every
device ends up with the same gradient of the whole $BN$-point batch, applies the same
update, and stays identical to the others.
""", r"""
## 勾配の平均で十分な理由

ミニバッチ SGD はバッチ内の損失の平均を最小化します。デバイスの数を $N$、各デバイスが扱うデータ点の数を $B$ とし、全体のバッチを $B \times N$ 個の点 $X = \{\mathbf{x}_1, \dots, \mathbf{x}_{BN}\}$ とすると、目的関数は次のとおりです。

$$
L(\mathbf{w}) = \frac{1}{BN} \sum_{i=1}^{BN} \ell\big(f(\mathbf{x}_i; \mathbf{w}), y_i\big)
$$

$f$ はネットワーク、$\mathbf{w}$ は学習するパラメータ、$\ell$ は 1 点あたりの損失です。微分は線形なので、各点を持つデバイス $n$（その分担を $X_n$、$|X_n| = B$ とします）ごとに勾配を分けて書けます。

$$
\nabla_{\mathbf{w}} L
= \frac{1}{N} \sum_{n=1}^{N} \underbrace{\frac{1}{B} \sum_{\mathbf{x}_i \in X_n}
\nabla_{\mathbf{w}}\, \ell\big(f(\mathbf{x}_i; \mathbf{w}), y_i\big)}_{\mathbf{g}_n
\text{: デバイス } n \text{ で計算}}
$$

つまり、各デバイスは自分の $B$ 点についての平均勾配 $\mathbf{g}_n$ を通常の forward と backward で求め、その後 $\mathbf{g}_n$ を全デバイスで合計して $N$ で割れば十分です。この「合計して割る」処理が 1 回の集団通信 `comm.all_reduce(..., division=True)` です。すべてのデバイスが $BN$ 点全体の勾配を同じ値で受け取り、同じ更新をするので、重みはデバイス間でずっと一致したままです。
"""),
("md", r"""
## Starting the cluster

`dpnb.start` launches an IPython-parallel controller and two engines under `mpiexec`, one
engine per MPI rank, and connects this notebook to them. Engine ids equal MPI ranks, and
`%%px` cells now run on every rank. It prints nothing; the cell returns once both engines
are ready.

Instead of starting engines from the notebook, you can keep them running outside it:
run `dpnb profile install` once, then `ipcluster start --profile=mpi -n 2` in a terminal
(or start the "mpi" profile in JupyterLab's IPython Clusters panel). Connect to them with
`cluster = dpnb.Cluster.attach("mpi")`, or with plain ipyparallel:

```python
import ipyparallel as ipp
rc = ipp.Client(profile="mpi")
view = rc[:]
view.block = True      # %%px then shows the engines' output in the cell
view.activate()
```

and pass the view to the helpers used below, e.g. `dpnb.gather_grads(view)`.
""", r"""
## クラスタの起動

`dpnb.start` は IPython-parallel のコントローラと、`mpiexec` の下で動く 2 つのエンジン（MPI ランクごとに 1 つ）を起動し、このノートブックをそれらに接続します。エンジン ID は MPI ランクと同じで、以後 `%%px` セルはすべてのランクで実行されます。何も表示せず、両方のエンジンの準備ができた時点でセルが終わります。

エンジンをノートブックの外で動かし続けることもできます。一度 `dpnb profile install` を実行しておき、ターミナルで `ipcluster start --profile=mpi -n 2` を実行するか、JupyterLab の IPython Clusters パネルで "mpi" プロファイルを起動します。接続には `cluster = dpnb.Cluster.attach("mpi")` を使うか、ipyparallel だけで次のようにします。

```python
import ipyparallel as ipp
rc = ipp.Client(profile="mpi")
view = rc[:]
view.block = True      # これで %%px がエンジンの出力をセルに表示する
view.activate()
```

この場合、以下で使う補助関数には `dpnb.gather_grads(view)` のようにビューを渡します。
"""),
("code", r"""
import dpnb

cluster = dpnb.start(n=2, timeout=120)
""", r"""
import dpnb

dpnb.set_language("ja")  # 表の見出しと進捗バーのラベルを日本語で表示する
cluster = dpnb.start(n=2, timeout=120)
"""),
("md", r"""
Each `%%px` cell shows the ranks' output once the cell has finished, rank 0 first: dpnb
turns off ipyparallel's streaming, which interleaves the output as it arrives.
`%pxconfig --stream` turns it back on, for a long cell whose prints should show while it
runs.
""", r"""
各 `%%px` セルの出力は、セルの終了後にランク 0 から順に表示されます。dpnb は、届いた順に出力を混ぜて表示する ipyparallel のストリーミングを止めています。実行中に出力を見たい長いセルでは、`%pxconfig --stream` でストリーミングに戻せます。
"""),
("md", r"""
## Which rank runs where

Each row is one engine: its MPI rank, the host and process it runs in, its rank among the
processes on that host (`local rank`), and the device it uses.
""", r"""
## どのランクがどこで動いているか

1 行が 1 つのエンジンです。MPI ランク、動いているホストとプロセス、そのホスト上での順位（`local rank`）、使うデバイスを示します。
"""),
("code", r"""
cluster.topology()
""", None, ["topology"]),
("md", r"""
## Imports on every rank

From here on, `%%px` cells run on both ranks at once. The code is the same as for a
single process; only the communicator is new. The imports are nnabla's own: dpnb's
engines stand in for nnabla where it is not installed, so `import nnabla as nn` gives
dpnb (`import dpnb as nn` works as well).
""", r"""
## 各ランクでのインポート

ここからの `%%px` セルは両方のランクで同時に実行されます。コードは 1 プロセスの場合と同じで、新しいのはコミュニケーターだけです。インポートは nnabla のものそのままです。nnabla がインストールされていない環境では dpnb のエンジンが nnabla の代わりを務めるので、`import nnabla as nn` で dpnb が使われます（`import dpnb as nn` と書いても同じです）。
"""),
("code", r"""
%%px
import numpy as np

import dpnb
import nnabla as nn
import nnabla.communicators as C
import nnabla.functions as F
import nnabla.parametric_functions as PF
import nnabla.solvers as S
from nnabla.ext_utils import get_extension_context
from nnabla.initializer import UniformInitializer, calc_uniform_lim_glorot
""", None),
("md", r"""
## The communicator

`dpnb.default_extension()` answers `"cudnn"` where the process has a GPU and `"cpu"`
otherwise, so the same notebook runs on both. `comm.init()` joins the MPI job; the context
is then made for device `comm.local_rank`, the rank's position on its own host, which is
also right when the ranks span several machines.
""", r"""
## コミュニケーター

`dpnb.default_extension()` は、プロセスから GPU が使えれば `"cudnn"`、使えなければ `"cpu"` を返すので、同じノートブックがどちらでも動きます。`comm.init()` で MPI ジョブに参加し、その後デバイス `comm.local_rank`（そのホスト上でのランクの順位）用のコンテキストを作ります。ランクが複数のマシンにまたがる場合もこれで正しいデバイスになります。
"""),
("code", r"""
%%px
extension_module = dpnb.default_extension()
ctx = get_extension_context(extension_module)
comm = C.MultiProcessCommunicator(ctx)
comm.init()
n_devices = comm.size
mpi_rank = comm.rank
device_id = comm.local_rank
ctx = get_extension_context(extension_module, device_id=device_id)
""", None),
("code", r"""
%%px
print(f"n_devices={n_devices}")
print(f"mpi_rank={mpi_rank}")
""", None),
("md", r"""
## Data and a very small network

Each rank seeds NumPy with its own rank, so the ranks get different data points (their
share of the global batch) and the numbers below are the same on every run.

The initial weights, on the other hand, must be equal on every rank: the initialiser gets
its own random generator with the same seed everywhere.
""", r"""
## データ点ととても小さなネットワーク

各ランクは自分のランク番号で NumPy の乱数を初期化します。これでランクごとに異なるデータ点（全体のバッチのうち自分の分担）を持ち、しかも以下の数値は毎回同じになります。

一方、重みの初期値はすべてのランクで等しくなければなりません。そのため初期化には、どのランクでも同じシードの乱数生成器を別に渡します。
"""),
("code", r"""
%%px
np.random.seed(mpi_rank)

# Data points: B = 4 per rank
n_class = 2
b, c, h, w = 4, 1, 32, 32
x_data = np.random.rand(b, c, h, w)
y_data = np.random.choice(n_class, b).reshape((b, 1))
x = nn.Variable(x_data.shape)
y = nn.Variable(y_data.shape)
x.d = x_data
y.d = y_data

# Network settings
C = 1
kernel = (3, 3)
pad = (1, 1)
stride = (1, 1)
print("labels:", y_data.ravel().tolist())
""", r"""
%%px
np.random.seed(mpi_rank)

# データ点: ランクあたり B = 4
n_class = 2
b, c, h, w = 4, 1, 32, 32
x_data = np.random.rand(b, c, h, w)
y_data = np.random.choice(n_class, b).reshape((b, 1))
x = nn.Variable(x_data.shape)
y = nn.Variable(y_data.shape)
x.d = x_data
y.d = y_data

# ネットワークの設定
C = 1
kernel = (3, 3)
pad = (1, 1)
stride = (1, 1)
print("labels:", y_data.ravel().tolist())
"""),
("code", r"""
%%px
rng = np.random.RandomState(0)  # the same seed on every rank: equal initial weights
w_init = UniformInitializer(calc_uniform_lim_glorot(C, C / 2, kernel=(1, 1)), rng=rng)

with nn.context_scope(ctx):
    h = PF.convolution(x, C, kernel, pad, stride, w_init=w_init)
    pred = PF.affine(h, n_class, w_init=w_init)
    loss = F.mean(F.softmax_cross_entropy(pred, y))
""", r"""
%%px
rng = np.random.RandomState(0)  # どのランクでも同じシード: 重みの初期値が一致する
w_init = UniformInitializer(calc_uniform_lim_glorot(C, C / 2, kernel=(1, 1)), rng=rng)

with nn.context_scope(ctx):
    h = PF.convolution(x, C, kernel, pad, stride, w_init=w_init)
    pred = PF.affine(h, n_class, w_init=w_init)
    loss = F.mean(F.softmax_cross_entropy(pred, y))
"""),
("md", r"""
`dpnb.check_sync()` compares a checksum of every parameter across the ranks (only the
parameters that differ would be pulled into the notebook). Before any training they are
identical:
""", r"""
`dpnb.check_sync()` は各パラメータのチェックサムをランク間で比較します（値そのものをノートブックに取り寄せるのは、食い違ったパラメータだけです）。学習前なので一致しています。
"""),
("code", r"""
dpnb.check_sync()
""", None),
("md", r"""
## The solver

Each rank gets its own Adam solver over its own copy of the parameters. Because the
gradients will be identical after `all_reduce`, the solvers' states stay identical too.
""", r"""
## ソルバー

各ランクは自分のパラメータに対して自分の Adam ソルバーを持ちます。`all_reduce` の後は勾配が一致するので、ソルバーの内部状態も一致したままです。
"""),
("code", r"""
%%px
solver = S.Adam()
solver.set_parameters(nn.get_parameters())
""", None),
("md", r"""
## One training step, looked at closely

On a single device a step is

```python
loss.forward()
solver.zero_grad()
loss.backward()
solver.update()
```

and data-parallel training adds exactly one line before the update:

```python
comm.all_reduce([x.grad for x in nn.get_parameters().values()], division=True)
```

First forward, zero_grad and backward. Each rank's loss is that of its own four points.
""", r"""
## 1 ステップを詳しく見る

1 つのデバイスでは、1 ステップは次のとおりです。

```python
loss.forward()
solver.zero_grad()
loss.backward()
solver.update()
```

データ並列学習で加わるのは、更新の前の次の 1 行だけです。

```python
comm.all_reduce([x.grad for x in nn.get_parameters().values()], division=True)
```

まず forward、zero_grad、backward を実行します。各ランクの損失は、そのランクの 4 点についての値です。
"""),
("code", r"""
%%px
loss.forward()
solver.zero_grad()
loss.backward()
print(f"loss on this rank: {float(loss.d):.4f}")
""", r"""
%%px
loss.forward()
solver.zero_grad()
loss.backward()
print(f"このランクの損失: {float(loss.d):.4f}")
"""),
("md", r"""
Losses of about 30 are far above the $\ln 2 \approx 0.69$ of a guess between two classes.
The tutorial (like nnabla's) initialises the affine layer with the same Glorot limits as
the one-channel convolution, $\pm 2$ (`calc_uniform_lim_glorot(C, C / 2)`), where its
1024 inputs would call for about $\pm 0.08$: the two logits then lie tens apart, and a
point on the wrong side costs that gap. The training below brings the losses down.
""", r"""
損失は約 30 で、2 クラスを当て推量したときの $\ln 2 \approx 0.69$ よりずっと大きな値です。このチュートリアルは（nnabla のものと同じく）全結合層も 1 チャンネルの畳み込みと同じ Glorot の範囲 $\pm 2$（`calc_uniform_lim_glorot(C, C / 2)`）で初期化しますが、1024 個の入力に見合う範囲は約 $\pm 0.08$ です。そのため 2 つのロジットは数十も離れ、誤った側にある点ではその差がそのまま損失になります。以下の学習で損失は下がっていきます。
"""),
("md", r"""
`dpnb.gather_grads()` brings every parameter's gradient from every rank into the notebook.
The ranks saw different points, so their gradients differ:
""", r"""
`dpnb.gather_grads()` は、すべてのランクのすべてのパラメータの勾配をノートブックに集めます。ランクごとに見たデータ点が違うので、勾配も異なります。
"""),
("code", r"""
before = dpnb.gather_grads()
before
""", None),
("md", r"""
Now the collective: sum the gradients over the ranks and divide by the number of ranks.
`all_reduce` alone would only sum; `division=True` turns the sum into the mean that the
formula above asks for. The gradients are written back in place.
""", r"""
ここで集団通信を実行します。勾配をランク全体で合計し、ランク数で割ります。`all_reduce` だけでは合計ですが、`division=True` で上の式が求める平均になります。結果は元の勾配にそのまま書き戻されます。
"""),
("code", r"""
%%px
comm.all_reduce([x.grad for x in nn.get_parameters().values()], division=True)
""", None),
("md", r"""
Gathered again, the gradients are the same on both ranks. The comparison shows, per
parameter, the norm of each rank's gradient and the largest difference between ranks,
before and after `all_reduce`:
""", r"""
もう一度集めると、勾配は両方のランクで同じです。比較表には、パラメータごとに各ランクの勾配のノルムとランク間の最大差を、`all_reduce` の前と後について示します。
"""),
("code", r"""
after = dpnb.gather_grads()
comparison = dpnb.compare(before, after)
comparison
""", None, ["comparison"]),
("md", r"""
Each rank's gradient after `all_reduce` is the mean of the two gradients before it:
""", r"""
`all_reduce` 後の勾配は、`all_reduce` 前の 2 つの勾配の平均になっています。
"""),
("code", r"""
import numpy as np

for name in before[0]:
    mean = (before[0][name].astype(np.float64) + before[1][name]) / 2
    print(f"{name:9s} equals the mean of the ranks: {np.allclose(after[0][name], mean, rtol=1e-5, atol=1e-6)}")
""", r"""
import numpy as np

for name in before[0]:
    mean = (before[0][name].astype(np.float64) + before[1][name]) / 2
    print(f"{name:9s} ランク間の平均と一致: {np.allclose(after[0][name], mean, rtol=1e-5, atol=1e-6)}")
"""),
("md", r"""
The same in a picture for the two weights: each panel draws one gradient (its first 40
values), one line per rank. Before `all_reduce` the lines differ; after it they lie on top of each
other.
""", r"""
同じことを 2 つの重みについて図で見ます。各パネルは 1 つの勾配（先頭 40 個の値）を、ランクごとに 1 本の線で描いています。`all_reduce` の前は線がずれていて、後では重なります。
"""),
("code", r"""
from dpnb.notebook import plot_grads

plot_grads(before, after, names=["conv/W", "affine/W"], max_values=40)
""", None),
("md", r"""
## The update

With identical gradients and identical solver states, the update keeps the parameters
identical on every rank:
""", r"""
## 更新

勾配もソルバーの状態も同じなので、更新後もパラメータはすべてのランクで一致します。
"""),
("code", r"""
%%px
solver.update()
""", None),
("code", r"""
dpnb.check_sync()
""", None),
("md", r"""
## A short training loop on every rank

The whole step in a loop. `dpnb.notebook.report` sends each rank's step and loss to the
notebook while the cell runs, which draws a progress bar and a live loss curve (it does
nothing outside engines, so the same loop runs in a plain script).
""", r"""
## 全ランクでの短い学習ループ

1 ステップ全体をループにします。`dpnb.notebook.report` はセルの実行中に各ランクのステップと損失をノートブックに送り、ノートブックはそれを進捗バーと損失曲線として表示します（エンジンの外では何もしないので、同じループを普通のスクリプトでも実行できます）。
"""),
("code", r"""
%%px
# NBVAL_IGNORE_OUTPUT
from dpnb.notebook import report

n_steps = 100
losses = []
for step in range(1, n_steps + 1):
    loss.forward()
    solver.zero_grad()
    loss.backward()
    comm.all_reduce([x.grad for x in nn.get_parameters().values()], division=True)
    solver.update()
    losses.append(float(loss.d))
    report(step, n_steps, loss=losses[-1])
""", None),
("md", r"""
Each rank's loss over its own points, at the start and at the end, and the curves. The
last digits of a loss after 100 steps depend on the machine: BLAS libraries sum the
products of a matrix multiplication in different orders on different CPUs, and training
amplifies a difference in the last bit. So the cell checks what holds everywhere, that
every rank's loss fell to less than half, and its numbers are not compared when the
notebook is tested.
""", r"""
各ランクの、自分のデータ点についての最初と最後の損失、そして損失曲線です。100 ステップ後の損失の下位の桁はマシンによって変わります。BLAS ライブラリは CPU ごとに行列積の和を異なる順序で計算し、学習はその最後の 1 ビットの違いを増幅するからです。そこでこのセルは、どこでも成り立つこと（すべてのランクで損失が半分未満に下がったこと）を確かめます。ノートブックのテストでは、ここに表示される数値は比較しません。
"""),
("code", r"""
# NBVAL_IGNORE_OUTPUT
losses = dpnb.gather("losses")
for rank, values in losses.items():
    print(f"rank {rank}: loss {values[0]:.3f} -> {values[-1]:.3f}")
    assert values[-1] < values[0] / 2, f"rank {rank}'s loss did not fall to less than half"
""", r"""
# NBVAL_IGNORE_OUTPUT
losses = dpnb.gather("losses")
for rank, values in losses.items():
    print(f"ランク {rank}: 損失 {values[0]:.3f} -> {values[-1]:.3f}")
    assert values[-1] < values[0] / 2, f"ランク {rank} の損失が半分未満に下がっていない"
""", ["training"]),
("md", r"""
The parameters are still identical on every rank:
""", r"""
パラメータはまだすべてのランクで一致しています。
"""),
("code", r"""
dpnb.check_sync()
""", None, ["training"]),
("code", r"""
from dpnb.notebook import plot_losses

plot_losses({rank: list(enumerate(values, 1)) for rank, values in losses.items()})
""", None),
("md", r"""
## The gradient reducer

nnabla's `comm.all_reduce(list)` is all the tutorial needs. dpnb also lets the object that
knows the parameters own their exchange: `comm.gradient_reducer(solver, division=True)` is
built once from the solver's flat parameter storage. `reducer.all_reduce()` after backward
does what the list call did; passed to `backward`, the reducer sends the gradients pack by
pack while backward is still running. Ten more steps that way:
""", r"""
## 勾配リデューサ

このチュートリアルには nnabla の `comm.all_reduce(list)` で足ります。dpnb ではさらに、パラメータを知っているオブジェクトにその交換を任せられます。`comm.gradient_reducer(solver, division=True)` はソルバーのフラットなパラメータ領域から一度だけ作られます。backward の後の `reducer.all_reduce()` はリストを渡す呼び出しと同じことをし、`backward` に渡すと、backward の実行中に勾配をパックごとに送ります。その形でさらに 10 ステップ学習します。
"""),
("code", r"""
%%px
reducer = comm.gradient_reducer(solver, division=True)
for step in range(10):
    loss.forward()
    solver.zero_grad()
    loss.backward(communicator_callbacks=reducer)
    solver.update()
    losses.append(float(loss.d))
""", None),
("code", r"""
dpnb.check_sync()
""", None),
("md", r"""
## Resume after an engine dies

An engine that dies (out of memory, a crash in native code, a lost host) takes the whole
MPI job with it, and a plain `cluster.restart()` gives fresh engines with empty namespaces.
Two things let a restart keep the session instead:

- dpnb keeps a journal of the `%%px` cells that ran successfully, in order
  (`cluster.journal`, or `%dpnb journal`; entries can be removed or edited).
- `state = dpnb.TrainingState(solver=solver, step=0)` names the training state, and
  `state.commit()` writes it every few steps on every rank: parameters, solver states,
  random-generator states and the counters (`state.step`), into the cluster's state
  directory, which outlives the engines. A commit counts only once every rank has written
  its part.

`cluster.restart(resume=True)` (or `%dpnb restart --resume`) starts fresh engines, runs the
journal's cells again and restores the last commit. A cell that committed is a training
cell and is not run again by the restart: running it again continues from the commit.
""", r"""
## エンジンが落ちたあとの再開

エンジンが落ちると（メモリ不足、ネイティブコードでのクラッシュ、ホストの喪失など）MPI ジョブ全体が終わり、普通の `cluster.restart()` では名前空間が空の新しいエンジンになります。次の 2 つにより、再起動してもセッションを引き継げます。

- dpnb は成功した `%%px` セルを順に記録しています（`cluster.journal` または `%dpnb journal`。項目は削除も編集もできます）。
- `state = dpnb.TrainingState(solver=solver, step=0)` で学習の状態を名付け、数ステップごとに全ランクで `state.commit()` を呼ぶと、パラメータ、ソルバーの状態、乱数生成器の状態、カウンタ（`state.step`）がクラスタの状態ディレクトリに書かれます。このディレクトリはエンジンが落ちても残ります。コミットは全ランクが自分の分を書き終えて初めて有効になります。

`cluster.restart(resume=True)`（または `%dpnb restart --resume`）は新しいエンジンを起動し、記録されたセルをもう一度実行して、最後のコミットを復元します。コミットしたセルは学習セルとみなされ、再起動では実行されません。そのセルをもう一度実行すると、コミットの続きから学習します。
"""),
("code", r"""
%%px
state = dpnb.TrainingState(solver=solver, step=0)


def train_until(steps):  # train until state.step reaches steps, committing every 10
    while state.step < steps:
        loss.forward()
        solver.zero_grad()
        loss.backward()
        comm.all_reduce([x.grad for x in nn.get_parameters().values()], division=True)
        solver.update()
        state.step += 1
        if state.step % 10 == 0:
            state.commit()
    print(f"step {state.step}, last commit {state.committed}")
""", None),
("md", r"""
The training cell: 25 steps, committing every 10.
""", r"""
学習セルです。25 ステップ学習し、10 ステップごとにコミットします。
"""),
("code", r"""
%%px
train_until(25)
""", None),
("md", r"""
The journal so far (the `%dpnb` magics come with `%load_ext dpnb`):
""", r"""
ここまでの記録です（`%dpnb` マジックは `%load_ext dpnb` で使えるようになります）。
"""),
("code", r"""
trained = dpnb.gather("nn.get_parameters()")
%load_ext dpnb
%dpnb journal
""", None),
("md", r"""
Now rank 1's engine dies, five steps after the last commit (here we kill it ourselves):
""", r"""
ここでランク 1 のエンジンが、最後のコミットから 5 ステップ後に落ちます（ここでは自分で強制終了させます）。
"""),
("code", r"""
import os
import signal

engine_pids = cluster.view.apply_sync(os.getpid)
os.kill(engine_pids[1], signal.SIGKILL)
""", None),
("md", r"""
One call brings the session back (`cluster.restart(resume=True)` does the same):
""", r"""
1 回の呼び出しでセッションが戻ります（`cluster.restart(resume=True)` でも同じです）。
"""),
("code", r"""
%dpnb restart --resume
""", None),
("md", r"""
The engines are back at commit 2 (step 20). Running the training cell again continues from
there and ends with exactly the parameters the engines had before one of them died:
""", r"""
エンジンはコミット 2（ステップ 20）の状態に戻りました。学習セルをもう一度実行するとそこから続き、エンジンが落ちる前とまったく同じパラメータになります。
"""),
("code", r"""
%%px
train_until(25)
""", None),
("code", r"""
resumed = dpnb.gather("nn.get_parameters()")
print("identical to the parameters before the engine died:",
      all(np.array_equal(resumed[rank][name], trained[rank][name])
          for rank in trained for name in trained[rank]))
dpnb.check_sync()
""", r"""
resumed = dpnb.gather("nn.get_parameters()")
print("エンジンが落ちる前のパラメータと一致:",
      all(np.array_equal(resumed[rank][name], trained[rank][name])
          for rank in trained for name in trained[rank]))
dpnb.check_sync()
""", ["resume"]),
("md", r"""
## Stopping the cluster

`cluster.stop()` shuts the engines, `mpiexec` and the controller down, and makes sure none
of their processes is left.
""", r"""
## クラスタの停止

`cluster.stop()` はエンジン、`mpiexec`、コントローラを終了させ、それらのプロセスが残っていないことを確かめます。
"""),
("code", r"""
cluster.stop()
""", None),
("md", r"""
For training a real model over several processes or machines, see the CIFAR-10 notebook
beside this one and its program, `python -m dpnb.examples.cifar10 --help`, with its
`mpiexec` launcher `multi_device_multi_process_classification.sh` in the same package.
""", r"""
実際のモデルを複数のプロセスやマシンで学習する例は、このノートブックの隣にある CIFAR-10 のノートブックと、そのプログラム `python -m dpnb.examples.cifar10 --help`、同じパッケージにある `mpiexec` 起動用の `multi_device_multi_process_classification.sh` を参照してください。
"""),
]
