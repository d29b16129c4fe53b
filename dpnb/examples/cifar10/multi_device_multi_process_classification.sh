#!/usr/bin/env bash
# Data-parallel training with one process per GPU (or CPU slot).
#
#   ./multi_device_multi_process_classification.sh [N] [extra options...]
#
# N defaults to the number of GPUs, else to the number of CPU cores. The Python is $PYTHON,
# else that of the virtual environment this file is installed in (or of the clone's .venv),
# activated or not, else python3 from PATH; mpiexec is the one beside it (the mpich wheel
# puts it there), else the one on PATH.
# CIFAR-10 is read from (and with --download fetched into) nnabla's ~/nnabla_data unless
# DATA_DIR names another folder. On several machines, list them in a hostfile (one
# "host:slots" per line) and run e.g.
#   mpiexec -f hostfile -n 8 python -m dpnb.examples.cifar10 -c cudnn ...
# (MPICH; Open MPI spells it --hostfile).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-}"
dir="$here"
while [ -z "$python" ] && [ "$dir" != / ]; do
    dir="$(dirname "$dir")"
    for candidate in "$dir/bin/python" "$dir/.venv/bin/python"; do
        if [ -x "$candidate" ] && [ -f "$(dirname "$(dirname "$candidate")")/pyvenv.cfg" ]; then
            python="$candidate"; break
        fi
    done
done
python="${python:-python3}"
if ! "$python" -c 'import dpnb' 2>/dev/null; then
    echo "$0: $python cannot import dpnb; set PYTHON to the Python dpnb is installed in" >&2
    exit 1
fi

if command -v nvidia-smi >/dev/null 2>&1 && gpus="$(nvidia-smi -L 2>/dev/null | wc -l)" && [ "$gpus" -gt 0 ]; then
    default_n="$gpus"; context=cudnn
else
    default_n="$(nproc)"; context=cpu
    export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
fi
n="${1:-$default_n}"
shift || true

mpiexec="$(dirname "$("$python" -c 'import sys; print(sys.executable)')")/mpiexec"
[ -x "$mpiexec" ] || mpiexec="$(command -v mpiexec || true)"
if [ -z "$mpiexec" ]; then
    echo "$0: no mpiexec beside $python or on PATH; install dpnb with its mpich extra" >&2
    exit 1
fi

data_dir="${DATA_DIR:-$("$python" -c 'from dpnb.utils.data_source_loader import get_data_home; print(get_data_home())')}"
exec "$mpiexec" -n "$n" "$python" -m dpnb.examples.cifar10 \
    -c "$context" --dataset cifar10 --data-dir "$data_dir" \
    -b 64 -l 0.05 --epochs 100 -e 5 -o "${MONITOR_PATH:-tmp.monitor}" "$@"
