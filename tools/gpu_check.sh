#!/usr/bin/env bash
# The GPU checks of one session with a lent GPU machine, as one bounded script: whole models (bench_models.py
# --device cuda), the Triton tests on the real device, a `kernelgen tune` of examples/workloads_gpu.toml (then its
# pace per workload: time to first trial, trials per second, kernelgen.report.pace) and benchmarks/bench_gpu.py
# over its records (with each memory-bound row's share of the bandwidth floor).
# Each step has its own time limit so one slow step cannot starve the others; logs land in $OUT.
#
#     OUT=/tmp/out MODELS_S=240 TEST_S=200 TUNE_S=110 BENCH_S=70 [MANIFEST=...] [EXTRA=script.py] bash tools/gpu_check.sh [tests...]
#
# Python packages missing there travel as wheels in .whl/ (see the device tool's README).
set -uo pipefail
OUT=${OUT:-/tmp/kernelgen-gpu}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "gpu_check: wheel install failed"; exit 1; }
    export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1 KERNELGEN_CACHE_DIR=/tmp/kg-cache KERNELGEN_DB=sqlite:////tmp/kg-gpu.sqlite
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())'
# Whole models first (issue 31): eager, Inductor (default and reduce-overhead), kernelgen untuned, tuned and tuned with
# CUDA graphs, at GPU sizes (bf16 inference, fp32 training); needs transformers (a wheel in .whl/ where missing).
if [ "${MODELS_S:-240}" -gt 0 ]; then
    start=$(date +%s)
    timeout "${MODELS_S:-240}" python3 benchmarks/bench_models.py --device cuda --models "${GPU_MODELS:-hf-gpt2,hf-llama}" \
        --modes "${GPU_MODES:-infer,train}" --rounds "${MODEL_ROUNDS:-5}" --tune-seconds "${MODEL_TUNE_S:-20}" \
        > "$OUT/models.txt" 2>&1
    echo "models rc=$? in $(( $(date +%s) - start )) s"; grep -v "^ *{" "$OUT/models.txt" | tail -40 | cut -c1-400
fi
TESTS=("$@")
if [ ${#TESTS[@]} -eq 0 ]; then
    TESTS=(tests/backends/test_triton.py tests/codegen/test_lowered_pointwise_ops.py tests/codegen/test_lowered_reductions.py
           tests/codegen/test_triton_expr.py tests/frontend/test_backend_triton.py tests/frontend/test_triton_dispatch.py
           tests/models/test_models.py tests/opinfo/test_opinfo_triton.py tests/registry/test_registry_kernels.py
           tests/templates/test_attention_triton.py tests/templates/test_gemm_triton.py
           tests/templates/test_pointwise_moves_triton.py tests/templates/test_pointwise_triton.py
           tests/templates/test_reduction_dims_triton.py tests/templates/test_reduction_triton.py
           tests/templates/test_scan_triton.py tests/templates/test_vendor_gemm.py tests/test_dynamic_triton.py)
fi
start=$(date +%s)
timeout "${TEST_S:-200}" python3 -m pytest -q -n "${WORKERS:-12}" -p no:cacheprovider --timeout 150 -rfE \
    --junitxml "$OUT/junit.xml" "${TESTS[@]}" > "$OUT/tests.log" 2>&1
echo "tests rc=$? in $(( $(date +%s) - start )) s"
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | cut -c1-300 | tail -60
if [ "${TUNE_S:-110}" -gt 0 ]; then
    start=$(date +%s)
    timeout "${TUNE_S:-110}" python3 -m kernelgen tune "${MANIFEST:-examples/workloads_gpu.toml}" --seconds "${TUNE_PER_IMPL:-6}" --json \
        > "$OUT/tune.json" 2> "$OUT/tune.err"
    echo "tune rc=$? in $(( $(date +%s) - start )) s"; tail -5 "$OUT/tune.err" | cut -c1-300
    # per workload: seconds from the previous one's last record to its first trial, and trials per second
    python3 -m kernelgen.report.pace "$KERNELGEN_DB" --since "$start" 2>&1 | tee "$OUT/pace.txt" | cut -c1-200
fi
if [ "${BENCH_S:-70}" -gt 0 ]; then
    timeout "${BENCH_S:-70}" python3 benchmarks/bench_gpu.py --manifest "${MANIFEST:-examples/workloads_gpu.toml}" --rounds 3 --json > "$OUT/bench.txt" 2>&1
    echo "bench rc=$?"; grep -v '^ *[][{}"]' "$OUT/bench.txt" | head -40 | cut -c1-400
fi
if [ -n "${EXTRA:-}" ]; then
    timeout "${EXTRA_S:-60}" python3 "$EXTRA" > "$OUT/extra.txt" 2>&1
    echo "extra rc=$?"; grep -v "^ *#" "$OUT/extra.txt" | tail -25 | cut -c1-300
fi
