#!/bin/bash
# Second leased-GPU check: (A) the 'not the same arithmetic' note on real GPU agents at their
# defaults; (B) until-decided with FWBENCH_TF32=off for all, bigger batches; (C) the 16-core
# host's bimodal torch-cpu conv2d infer processes: glibc as shipped vs a fixed mmap threshold.
T0=$(date +%s)
if [ -z "$LOCAL" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site
fi
OUT=${OUT:-/tmp/decide2-out}; mkdir -p $OUT
PY=${PY:-$(which python3)}
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}collector:proto:agents/runtime PYTHONUNBUFFERED=1 \
  FWBENCH_STORE=/tmp/fwdecide/store.sqlite FWBENCH_CALIBRATION=off COLUMNS=200
C="${COLLECTOR:-python3 -m fwbench.collector.cli}"
step() { echo "== $1 exit $2 at $(( $(date +%s) - T0 )) s" | tee -a $OUT/steps.txt; }
if [ -z "$SKIP_GPU" ]; then
  timeout -s INT 75 $C run --agents torch-cu12,jax-cuda12 --python torch-cu12=$PY --python jax-cuda12=$PY \
    --workloads gemm --phases infer --batch-sizes 32 --until-decided --budget 40s --out /tmp/gpu-a > $OUT/gpu-a.log 2>&1
  step gpu-a $?
  timeout -s INT 165 $C run --agent-env FWBENCH_TF32=off --agents torch-cu12,jax-cuda12 --aa torch-cu12 \
    --python torch-cu12=$PY --python jax-cuda12=$PY --workloads gemm,conv2d --phases train,infer \
    --batch-sizes 256 --until-decided --budget 120s --out /tmp/gpu-b > $OUT/gpu-b.log 2>&1
  step gpu-b $?
fi
for cond in glibc fixed; do
  extra=""; [ $cond = fixed ] && extra="--agent-env MALLOC_MMAP_THRESHOLD_=33554432 --agent-env MALLOC_TRIM_THRESHOLD_=4294967296"
  timeout -s INT ${CPU_HARD:-80} $C run --agents torch-cpu --aa torch-cpu --python torch-cpu=$PY $extra \
    --workloads conv2d --phases infer --batch-sizes 8 --repeat ${REPEAT:-4} --out /tmp/cpu-$cond > $OUT/cpu-$cond.log 2>&1
  step cpu-$cond $?
done
tar czf $OUT/runs.tgz -C /tmp gpu-a gpu-b cpu-glibc cpu-fixed 2>/dev/null
for f in gpu-a gpu-b; do grep -A30 "measured until decided" $OUT/$f.log | head -24; done
cat $OUT/steps.txt; ls -la $OUT
