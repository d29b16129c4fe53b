"""The cells of the CIFAR-10 notebook: (kind, text)."""
CELLS = [
("md", """
# CIFAR-10 data-parallel training from a notebook

The example program `dpnb.examples.cifar10` (nnabla-examples'
`multi_device_multi_process_classification.py`, run with `python -m dpnb.examples.cifar10`) trains
ResNet-23 data-parallel: every rank reads its own shard of each epoch, the gradients are
averaged with `all_reduce`, the learning rate is warmed up to base x ranks, and rank 0
writes monitor files, a plot and checkpoints. Here the same training runs from `%%px`
cells on two MPI engines, on a short synthetic run (for CIFAR-10 itself, pass
`--dataset cifar10 --data-dir ...`).
"""),
("code", """
import dpnb

cluster = dpnb.start(n=2, timeout=120)
"""),
("md", """
## The example's training function on every rank

The script's `main(argv)` takes the same options as its command line. The engines import
it from dpnb (`dpnb.examples.cifar10`); rank 0 will write its monitor files and checkpoints
into a temporary folder.
"""),
("code", """
import tempfile
from pathlib import Path

monitor = tempfile.mkdtemp(prefix="dpnb-cifar10-")
_ = cluster.view.push({"monitor": monitor})
"""),
("code", """
%%px
import dpnb
from dpnb.examples.cifar10 import main
"""),
("md", """
## A short run

ResNet-23 with 8 feature maps on synthetic 32x32 images, 16 images per rank and step,
40 steps, validation and a checkpoint every 20 steps. While the cell runs, the notebook
shows a progress bar and each rank's loss curve (the script reports them when it runs on
an engine).
"""),
("code", """
%%px
# NBVAL_IGNORE_OUTPUT
options = ["-c", dpnb.default_extension(), "--dataset", "synthetic", "-b", "16", "-l", "0.02",
           "--nmaps", "8", "-e", "0.5", "-v", "20", "-s", "20", "-m", "5", "-o", monitor,
           "--no-progress"]
main(options + ["-i", "40"])
"""),
("md", """
Rank 0's monitor files: the validation rows (the whole test set, split across the ranks and
combined with `all_reduce`) and the plot of the curves. Their digits depend on the machine:
BLAS libraries sum the products of a matrix multiplication in different orders on different
CPUs, and a few dozen training steps amplify a difference in the last bit, so the notebook's
tests do not compare them; the end of the notebook checks what holds everywhere.
"""),
("code", """
# NBVAL_IGNORE_OUTPUT
import json

def validation_rows():
    with open(Path(monitor) / "validation.jsonl") as f:
        return [json.loads(line) for line in f]

def show_validation():
    for row in validation_rows():
        print(f"iteration {row['iteration']}: validation error {row['error']:.3f}, "
              f"loss {row['loss']:.3f}")

show_validation()
"""),
("code", """
# NBVAL_IGNORE_OUTPUT
from IPython.display import Image

Image(filename=str(Path(monitor) / "curves.png"))
"""),
("md", """
## Resuming

`--resume` continues from the latest checkpoint (parameters, solver state, iteration and
every rank's random state) as if the run had not stopped. Twenty more steps:
"""),
("code", """
%%px
# NBVAL_IGNORE_OUTPUT
main(options + ["-i", "60", "--resume"])
"""),
("code", """
# NBVAL_IGNORE_OUTPUT
show_validation()
"""),
("md", """
What holds on any machine: the run validated at iterations 20, 40 and 60, the validation
error fell, to below 0.7 (guessing one of the ten classes gives 0.9; this run ends between
0 and 0.45 with other seeds or BLAS kernels), and the ranks hold identical parameters.
"""),
("code", """
rows = validation_rows()
errors = [row["error"] for row in rows]
assert [row["iteration"] for row in rows] == [20, 40, 60], rows
assert errors[-1] < min(0.7, errors[0]), f"the validation error did not fall: {errors}"
print("validation error fell below 0.7 by iteration", rows[-1]["iteration"])

sync = dpnb.check_sync()
assert sync.in_sync, "the ranks' parameters differ"
sync
"""),
("code", """
import shutil

cluster.stop()
shutil.rmtree(monitor)
"""),
]

cells = []
