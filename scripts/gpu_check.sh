#!/usr/bin/env bash
# One-shot GPU check (about 5 minutes on an H200, 8 at most): build with CUDA for this
# card's architecture, run every `gpu`-labelled test (they must RUN, not skip), then the
# GPU decode benchmark. Results land in $OUT_DIR:
#   gpu_tests.log      ctest -L gpu output          gpu_tests.xml   JUnit
#   bench_gpu.json     decode tok/s + bandwidth     gpu_check.json  summary
#
#   scripts/gpu_check.sh [OUT_DIR]        (default: build-gpu/gpu_check)
#   KVFOLD_GPU_BUILD_DIR=dir  KVFOLD_GPU_ARCH=90  KVFOLD_BENCH_STEPS=20  (optional)
#
# Needs the build dependencies of scripts/setup.sh (Debian packages) and nvcc in PATH or
# /usr/local/cuda. Exit status: 0 all good, 1 a test or the benchmark failed, 2 setup
# problem (no GPU, no nvcc, configure failed).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR="${KVFOLD_GPU_BUILD_DIR:-build-gpu}"
OUT_DIR="${1:-$BUILD_DIR/gpu_check}"
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
START=$(date +%s)

log() { printf '\n== [%4ds] %s\n' "$(( $(date +%s) - START ))" "$*"; }
die() { printf '\ngpu_check: FAILED: %s\n' "$1" >&2; exit "${2:-1}"; }

log "device"
command -v nvidia-smi >/dev/null || die "nvidia-smi not found: no NVIDIA driver on this machine" 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
  || die "nvidia-smi cannot talk to the driver" 2
if [ -z "${KVFOLD_GPU_ARCH:-}" ]; then
  CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .' || true)
  KVFOLD_GPU_ARCH="${CAP:-80;90}"
fi
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$NVCC" ] || die "nvcc not found (PATH or /usr/local/cuda/bin)" 2
echo "nvcc: $NVCC ($("$NVCC" --version | tail -1)); architectures: $KVFOLD_GPU_ARCH"

log "configure ($BUILD_DIR)"
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S "$ROOT" -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DKVFOLD_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$NVCC" "-DCMAKE_CUDA_ARCHITECTURES=$KVFOLD_GPU_ARCH" \
  -DKVFOLD_BUILD_TESTS=ON -DKVFOLD_BUILD_TOOLS=ON > "$OUT_DIR/configure.log" 2>&1 \
  || { tail -30 "$OUT_DIR/configure.log"; die "cmake configure failed (dependencies: scripts/setup.sh)" 2; }

log "build"
TARGETS=(cuda_ops_test bench_gpu)
# The engine-level tests exist once the engine and memory mode are in the tree.
HELP=$(cmake --build "$BUILD_DIR" --target help 2>/dev/null || true)
for t in cuda_backend_test cuda_memory_mode_test cuda_int8_kv_test cuda_projector_test cuda_backend_factory_test; do
  if grep -qw "$t" <<<"$HELP"; then TARGETS+=("$t"); fi
done
echo "targets: ${TARGETS[*]}"
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${TARGETS[@]}" > "$OUT_DIR/build.log" 2>&1 \
  || { grep -E "error|FAILED" "$OUT_DIR/build.log" | head -40; die "build failed (see $OUT_DIR/build.log)"; }

log "gpu tests"
TESTS_RC=0
( cd "$BUILD_DIR" && ctest -L gpu --output-on-failure -V --timeout 300 \
    --output-junit "$OUT_DIR/gpu_tests.xml" ) > "$OUT_DIR/gpu_tests.log" 2>&1 || TESTS_RC=$?
grep -E "^\s*[0-9]+/[0-9]+ Test|tests passed|tests failed|\[  FAILED  \]" "$OUT_DIR/gpu_tests.log" || true
SKIPS=$(grep -c "gpu test skipped" "$OUT_DIR/gpu_tests.log" || true)
if [ "$SKIPS" != "0" ]; then
  echo "gpu_check: $SKIPS gpu tests SKIPPED although nvidia-smi sees a GPU:" >&2
  grep -m3 "gpu test skipped" "$OUT_DIR/gpu_tests.log" >&2
  TESTS_RC=1
fi
# ctest -V prefixes gtest lines with "N: "; count per-case results (with their timings).
PASSED=$(grep -cE "\[       OK \] .* \([0-9]+ ms\)" "$OUT_DIR/gpu_tests.log" || true)
FAILED=$(grep -cE "\[  FAILED  \] .* \([0-9]+ ms\)" "$OUT_DIR/gpu_tests.log" || true)

log "benchmark (tools/bench_gpu)"
BENCH_RC=0
timeout 300 "$BUILD_DIR/tools/bench_gpu/bench_gpu" --steps "${KVFOLD_BENCH_STEPS:-20}" \
  --out "$OUT_DIR/bench_gpu.json" > /dev/null 2> "$OUT_DIR/bench_gpu.log" || BENCH_RC=$?
cat "$OUT_DIR/bench_gpu.log"

ELAPSED=$(( $(date +%s) - START ))
cat > "$OUT_DIR/gpu_check.json" <<JSON
{
  "gpu": "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)",
  "cuda_architectures": "$KVFOLD_GPU_ARCH",
  "tests_exit_code": $TESTS_RC,
  "test_cases_passed": $PASSED,
  "test_cases_failed": $FAILED,
  "tests_skipped": $SKIPS,
  "bench_exit_code": $BENCH_RC,
  "bench": "bench_gpu.json",
  "elapsed_seconds": $ELAPSED
}
JSON
log "summary ($OUT_DIR)"
cat "$OUT_DIR/gpu_check.json"
[ "$TESTS_RC" = 0 ] || die "gpu tests failed (see $OUT_DIR/gpu_tests.log)"
[ "$BENCH_RC" = 0 ] || die "benchmark failed (see $OUT_DIR/bench_gpu.log)"
echo "gpu_check: OK in ${ELAPSED}s"
