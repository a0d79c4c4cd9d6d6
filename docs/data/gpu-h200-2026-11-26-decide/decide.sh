#!/bin/bash
# Leased-GPU check: --until-decided on the GPU (torch-cu12 vs jax-cuda12, A/A torch-cu12),
# then the issue-13 style CPU run (torch-cpu vs jax-cpu, A/A torch-cpu) on the same 16-core host.
# PYT/PYJ: the interpreters (default: the host's python3, which has both frameworks).
T0=$(date +%s)
if [ -n "$OUT" ] && ls .whl/*.whl >/dev/null 2>&1 && [ -z "$LOCAL" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site
fi
OUT=${OUT:-/tmp/decide-out}; mkdir -p $OUT
PYT=${PYT:-$(which python3)}; PYJ=${PYJ:-$PYT}
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}collector:proto:agents/runtime PYTHONUNBUFFERED=1 \
  FWBENCH_STORE=/tmp/fwdecide/store.sqlite FWBENCH_CALIBRATION=off COLUMNS=200
C="${COLLECTOR:-python3 -m fwbench.collector.cli}"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv; lscpu | grep -E "Model name|^CPU\(s\)|Thread"; uptime; } > $OUT/facts.txt 2>&1
if [ -z "$SKIP_GPU" ]; then
  nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu,power.draw --format=csv -lms 250 > /tmp/smi.csv 2>/dev/null &
  SMI=$!
  timeout -s INT ${GPU_HARD:-260} $C run --agents torch-cu12,jax-cuda12 --aa torch-cu12 \
    --python torch-cu12=$PYT --python jax-cuda12=$PYJ --workloads gemm,conv2d --phases train,infer \
    --batch-sizes 32 --until-decided --budget ${GPU_BUDGET:-3m} --out /tmp/gpu-decide > $OUT/gpu.log 2>&1
  echo "gpu run exit $? at $(( $(date +%s) - T0 )) s" | tee -a $OUT/gpu.log
  kill $SMI 2>/dev/null; cp /tmp/smi.csv /tmp/gpu-decide/ 2>/dev/null
fi
timeout -s INT ${CPU_HARD:-200} $C run --agents torch-cpu,jax-cpu --aa torch-cpu \
  --python torch-cpu=$PYT --python jax-cpu=$PYJ --workloads conv2d,gemm --phases train,infer \
  --batch-sizes 8 --until-decided --budget ${CPU_BUDGET:-150s} --out /tmp/cpu-decide > $OUT/cpu.log 2>&1
echo "cpu run exit $? at $(( $(date +%s) - T0 )) s" | tee -a $OUT/cpu.log
tar czf $OUT/gpu-decide.tgz -C /tmp gpu-decide 2>/dev/null
tar czf $OUT/cpu-decide.tgz -C /tmp cpu-decide 2>/dev/null
tail -n 25 $OUT/gpu.log 2>/dev/null; tail -n 22 $OUT/cpu.log; ls -la $OUT
