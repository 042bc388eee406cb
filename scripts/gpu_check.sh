#!/usr/bin/env bash
# One-shot GPU check (about 5 minutes on an H200 with the build, 1-2 from a bundle): build
# with CUDA for this card's architecture, run every `gpu`-labelled test (they must RUN, not
# skip), the real model on the device against the CPU, engine decode on a random 1B shape,
# then the GPU decode benchmark (docs/cuda.md). Results land in $OUT_DIR:
#   gpu_tests.log      test output                  gpu_tests.xml   JUnit (built route)
#   generate_*.txt     cuda / cpu greedy texts      engine_*.json   engine decode tok/s
#   bench_gpu.json     decode tok/s + bandwidth     gpu_check.json  summary
#
#   scripts/gpu_check.sh [OUT_DIR]        (default: build-gpu/gpu_check)
#   KVFOLD_GPU_BUILD_DIR=dir  KVFOLD_GPU_ARCH=90  KVFOLD_BENCH_STEPS=20  (optional)
#   KVFOLD_GPU_BUNDLE=dir                 (run a scripts/gpu_bundle.sh folder, build nothing)
#
# Building needs the build dependencies of scripts/setup.sh (Debian packages) and nvcc in
# PATH or /usr/local/cuda; a bundle needs only the driver and CUDA's cuBLAS. With the
# stories260K model present (shared material, or the bundle's copy) the kvfold CLI also
# generates greedily on the device and on the CPU and the two texts must match.
# Exit status: 0 all good, 1 a test, the real-model check, engine decode or the benchmark
# failed, 2 setup problem (no GPU, no nvcc, configure failed).
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
if [ -n "${KVFOLD_GPU_BUNDLE:-}" ]; then
  BUNDLE=$(cd "$KVFOLD_GPU_BUNDLE" && pwd)
  BIN="$BUNDLE/bin"
  # cuBLAS comes from the machine's CUDA: the toolkit's folders, else a pip wheel's.
  CUBLAS=$( (ldconfig -p | awk '/libcublas\.so\.[0-9]/ {print $NF; exit}') || true)
  [ -n "$CUBLAS" ] || CUBLAS=$(find /usr/local/cuda*/ /usr/lib /opt -name 'libcublas.so.[0-9]*' \
    2>/dev/null | head -1 || true)
  [ -n "$CUBLAS" ] || die "cuBLAS (libcublas.so) not found on this machine" 2
  export LD_LIBRARY_PATH="$BUNDLE/lib:$(dirname "$CUBLAS")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  [ -d "$BUNDLE/shared" ] && export KVFOLD_SHARED_DIR="$BUNDLE/shared"
  echo "bundle: $BUNDLE; cuBLAS: $CUBLAS"

  log "gpu tests (bundle)"
  TESTS_RC=0
  : > "$OUT_DIR/gpu_tests.log"
  while IFS=$'\t' read -r name exe; do
    rc=0
    KVFOLD_SOURCE_DIR="$ROOT" timeout 300 "$BIN/$exe" >> "$OUT_DIR/gpu_tests.log" 2>&1 || rc=$?
    case $rc in
      0) echo "test $name: Passed" ;;
      77) echo "test $name: gpu test skipped" | tee -a "$OUT_DIR/gpu_tests.log" ;;
      *) echo "test $name: FAILED (exit $rc)"; TESTS_RC=1 ;;
    esac
  done < "$BUNDLE/tests.tsv"
else
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
  TARGETS=(bench_gpu kvfold make_random_model)
  TARGETS+=($(ctest --test-dir "$BUILD_DIR" -L gpu -N | awk '/Test +#/ {print $3}'))
  echo "targets: ${TARGETS[*]}"
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${TARGETS[@]}" > "$OUT_DIR/build.log" 2>&1 \
    || { grep -E "error|FAILED" "$OUT_DIR/build.log" | head -40; die "build failed (see $OUT_DIR/build.log)"; }
  BIN="$OUT_DIR/bin"
  mkdir -p "$BIN"
  for t in bench_gpu kvfold make_random_model; do
    ln -sf "$(cd "$BUILD_DIR" && pwd)/tools/$t/$t" "$BIN/$t"
  done

  log "gpu tests"
  TESTS_RC=0
  ( cd "$BUILD_DIR" && ctest -L gpu --output-on-failure -V --timeout 300 \
      --output-junit "$OUT_DIR/gpu_tests.xml" ) > "$OUT_DIR/gpu_tests.log" 2>&1 || TESTS_RC=$?
  grep -E "^\s*[0-9]+/[0-9]+ Test|tests passed|tests failed|\[  FAILED  \]" "$OUT_DIR/gpu_tests.log" || true
fi
SKIPS=$(grep -c "gpu test skipped" "$OUT_DIR/gpu_tests.log" || true)
if [ "$SKIPS" != "0" ]; then
  echo "gpu_check: $SKIPS gpu tests SKIPPED although nvidia-smi sees a GPU:" >&2
  grep -m3 "gpu test skipped" "$OUT_DIR/gpu_tests.log" >&2
  TESTS_RC=1
fi
# ctest -V prefixes gtest lines with "N: "; count per-case results (with their timings).
PASSED=$(grep -cE "\[       OK \] .* \([0-9]+ ms\)" "$OUT_DIR/gpu_tests.log" || true)
FAILED=$(grep -cE "\[  FAILED  \] .* \([0-9]+ ms\)" "$OUT_DIR/gpu_tests.log" || true)
grep -E "\[  FAILED  \] .* \([0-9]+ ms\)" "$OUT_DIR/gpu_tests.log" || true

log "real model (stories260K, greedy, cuda vs cpu)"
MODEL_RC=0
S260="${KVFOLD_SHARED_DIR:-$ROOT/../shared}/models/stories260K"
if [ -f "$S260/stories260K.bin" ]; then
  # Full mode with F32 KV, a 64-token sliding window over an INT8 cache, and memory mode
  # with the trained projector (history folded into the memory block every 64 tokens).
  for cfg in "full f32" "sliding int8" "memory f32 --projector $ROOT/models/stories260K-projector"; do
    set -- $cfg
    for be in cuda cpu; do
      "$BIN/kvfold" generate --model "$S260/stories260K.bin" --tokenizer "$S260/tok512.bin" \
        --backend "$be" --mode "$1" --window 64 --kv-dtype "$2" --prompt "Once upon a time" "${@:3}" \
        --max-new-tokens 300 --ignore-eos --temperature 0 \
        > "$OUT_DIR/generate_$1_$be.txt" 2> "$OUT_DIR/generate_$1_$be.log" || MODEL_RC=$?
    done
    if [ "$MODEL_RC" = 0 ] && cmp -s "$OUT_DIR/generate_$1_cuda.txt" "$OUT_DIR/generate_$1_cpu.txt"; then
      echo "$1 $2: cuda and cpu greedy texts identical ($(wc -c < "$OUT_DIR/generate_$1_cuda.txt") bytes)"
    else
      MODEL_RC=1
      echo "$1 $2: cuda and cpu greedy texts differ or a run failed:"; tail -n 3 "$OUT_DIR"/generate_"$1"_*.log
      diff <(fold -w 80 "$OUT_DIR/generate_$1_cpu.txt") <(fold -w 80 "$OUT_DIR/generate_$1_cuda.txt") | head -10 || true
    fi
  done
else
  echo "skipped: no stories260K under $S260"
fi

log "engine decode (random Llama-3.2-1B shape, bf16 and q8 weights, cuda backend)"
ENGINE_RC=0
if [ -x "$BIN/make_random_model" ]; then
  M="$(mktemp -d)/llama1b"
  { "$BIN/make_random_model" --shape llama-3.2-1b --dtype bf16 --out "$M-bf16" \
      && "$BIN/kvfold" convert --model "$M-bf16" --dtype q8 --out "$M-q8"; } \
    > "$OUT_DIR/engine.log" 2>&1 || ENGINE_RC=$?
  for w in bf16 q8; do
    [ "$ENGINE_RC" = 0 ] || break
    "$BIN/kvfold" generate --model "$M-$w" --backend cuda --prompt-ids 1,2,3,4,5,6,7,8 \
      --max-new-tokens 256 --ignore-eos --temperature 0 --json \
      > "$OUT_DIR/engine_$w.json" 2>> "$OUT_DIR/engine.log" || ENGINE_RC=$?
    field() { grep -o "\"$1\":[0-9.e+-]*" "$OUT_DIR/engine_$w.json" | cut -d: -f2; }
    echo "$w weights: $(field generated_tokens) tokens, $(field decode_tokens_per_second) tok/s decode," \
      "$(field prefill_seconds) s prefill"
  done
  rm -rf "$(dirname "$M")"
  [ "$ENGINE_RC" = 0 ] || { echo "engine decode failed:"; tail -5 "$OUT_DIR/engine.log"; }
else
  echo "skipped: make_random_model not built"
fi

log "benchmark (tools/bench_gpu)"
BENCH_RC=0
timeout 300 "$BIN/bench_gpu" --steps "${KVFOLD_BENCH_STEPS:-20}" \
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
  "real_model_exit_code": $MODEL_RC,
  "engine_exit_code": $ENGINE_RC,
  "bench_exit_code": $BENCH_RC,
  "bench": "bench_gpu.json",
  "elapsed_seconds": $ELAPSED
}
JSON
log "summary ($OUT_DIR)"
cat "$OUT_DIR/gpu_check.json"
[ "$TESTS_RC" = 0 ] || die "gpu tests failed (see $OUT_DIR/gpu_tests.log)"
[ "$MODEL_RC" = 0 ] || die "real-model check failed (see $OUT_DIR/generate_*.log)"
[ "$ENGINE_RC" = 0 ] || die "engine decode failed (see $OUT_DIR/engine.log)"
[ "$BENCH_RC" = 0 ] || die "benchmark failed (see $OUT_DIR/bench_gpu.log)"
echo "gpu_check: OK in ${ELAPSED}s"
