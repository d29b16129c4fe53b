#!/usr/bin/env bash
# Data-parallel training with one process per GPU (or CPU slot).
#
#   ./multi_device_multi_process_classification.sh [N] [extra options...]
#
# N defaults to the number of GPUs, else to the number of CPU cores. On several
# machines, list them in a hostfile (one "host:slots" per line) and run e.g.
#   mpiexec -f hostfile -n 8 python multi_device_multi_process_classification.py -c cudnn ...
# (MPICH; Open MPI spells it --hostfile).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python}"

if command -v nvidia-smi >/dev/null 2>&1 && gpus="$(nvidia-smi -L 2>/dev/null | wc -l)" && [ "$gpus" -gt 0 ]; then
    default_n="$gpus"; context=cudnn
else
    default_n="$(nproc)"; context=cpu
    export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
fi
n="${1:-$default_n}"
shift || true

# mpiexec from the Python environment (the mpich wheel puts it there), else from PATH.
mpiexec="$(dirname "$("$python" -c 'import sys; print(sys.executable)')")/mpiexec"
[ -x "$mpiexec" ] || mpiexec=mpiexec

exec "$mpiexec" -n "$n" "$python" "$here/multi_device_multi_process_classification.py" \
    -c "$context" --dataset cifar10 --data-dir "${DATA_DIR:-$here/data}" \
    -b 64 -l 0.05 --epochs 100 -e 5 -o "${MONITOR_PATH:-$here/tmp.monitor}" "$@"
