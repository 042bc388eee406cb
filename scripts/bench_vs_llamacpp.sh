#!/usr/bin/env bash
# kvfold vs llama.cpp on the same machine, same model shape, same precision, same thread
# count, runs interleaved (kvfold, llama.cpp, kvfold, ...) so load noise hits both.
#
#   scripts/bench_vs_llamacpp.sh LLAMA_CPP_BIN_DIR [--reps N] [--long-reps N] [--scratch DIR]
#        [--tokenizer-32k FILE] [--stories260k DIR_WITH_stories260K.bin_AND_tok512.bin]
#        [--rows s110,q8,q4k,long,batch] [--threads 1,2]
#
# LLAMA_CPP_BIN_DIR holds llama-bench, llama-quantize and llama-convert-llama2c-to-ggml,
# and for the batch row llama-batched-bench (without it that row is skipped with a note).
# Models are built once into the scratch dir (default $KVFOLD_BENCH_DIR or a new temp
# dir): a random llama2.c checkpoint of stories110M's shape
# (scripts/make_llama2c_checkpoint.py), its GGUF (f32 and Q8_0) and its kvfold q8
# conversion (`kvfold convert --dtype q8`), and stories260K's GGUF. The 32000-token
# llama2 tokenizer (llama2.c's tokenizer.bin) gives the GGUF its vocab; by default
# ../shared/models/tokenizers/llama2_32000.bin and ../shared/models/stories260K.
#
# --reps (default 3) interleaved pairs per stories110m row, --long-reps (default 1) for the
# 10k-token row, --threads (default 1,2) the thread counts of every row. Prints the
# load average and the llama.cpp commit measured (llama-bench's
# build_commit, else the git checkout above LLAMA_CPP_BIN_DIR), then one table per target:
# kvfold and llama.cpp medians over the reps, kvfold / llama.cpp, and the median and range
# of the per-rep ratios (each kvfold run over the llama.cpp run after it). Targets: stories110m
# f32 prefill (128-token prompt) and decode (32 tokens) at 1 and 2 threads (decode from an
# empty context on both sides, as llama-bench's tg test does: kvfold's context-1 row; its
# decode after the 128-token prompt is shown beside it); stories110m q8
# vs Q8_0 at 1 and 2 threads; the q4k row (no target) serves one `llama-quantize ... Q4_K_M`
# file on both sides (kvfold reads it as Q8); stories260K 10240-token prompt, full mode, 1
# and 2 threads; kvfold
# decode against the STREAM triad roofline (bench_engine's triad, same process: bytes/s /
# bytes per token). Both sides time a warm prompt: llama-bench runs an untimed warm-up prompt
# of the same length first, bench_engine the same with --prefill-warmup. The batch row
# (no target of its own: the batching target is bench_service's, docs/engine.md
# "Batched decode") puts the engines' batched decode side by side, f32 and q8 / Q8_0, fp16 KV
# on both: one and 16 sequences of an 8-token prompt each, 128 decode steps, kvfold's
# `bench_engine --batch-sizes 1,16` against `llama-batched-bench -npp 8 -ntg 128 -npl 1,16`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_DIR="${KVFOLD_BUILD_DIR:-$ROOT/build}"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
LLAMA="${1:?usage: bench_vs_llamacpp.sh LLAMA_CPP_BIN_DIR [--reps N] [--scratch DIR] ...}"
shift
REPS=3
LONG_REPS=1
SCRATCH="${KVFOLD_BENCH_DIR:-}"
TOK32K="$ROOT/../shared/models/tokenizers/llama2_32000.bin"
S260="$ROOT/../shared/models/stories260K"
ROWS="s110,q8,q4k,long,batch"
THREADS="1,2"
while (($#)); do
  case "$1" in
    --reps) REPS="$2"; shift 2 ;;
    --long-reps) LONG_REPS="$2"; shift 2 ;;
    --scratch) SCRATCH="$2"; shift 2 ;;
    --tokenizer-32k) TOK32K="$2"; shift 2 ;;
    --stories260k) S260="$2"; shift 2 ;;
    --rows) ROWS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
    *) echo "bench_vs_llamacpp: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$SCRATCH" ] || SCRATCH="$(mktemp -d)"
mkdir -p "$SCRATCH"
BENCH="$BUILD_DIR/tools/bench_engine/bench_engine"
KVFOLD="$BUILD_DIR/tools/kvfold/kvfold"
for b in "$BENCH" "$KVFOLD" "$LLAMA/llama-bench" "$LLAMA/llama-quantize" \
         "$LLAMA/llama-convert-llama2c-to-ggml"; do
  [ -x "$b" ] || { echo "bench_vs_llamacpp: missing $b (build kvfold / llama.cpp first)" >&2; exit 1; }
done
has_row() { [[ ",$ROWS," == *",$1,"* ]]; }
if has_row batch && [ ! -x "$LLAMA/llama-batched-bench" ]; then
  echo "bench_vs_llamacpp: no $LLAMA/llama-batched-bench, batch row skipped" \
    "(cmake --build LLAMA_CPP_BUILD_DIR --target llama-batched-bench)" >&2
  ROWS=",$ROWS,"; ROWS="${ROWS//,batch,/,}"
fi

# ---- Models (built once). ----
cd "$SCRATCH"
if has_row s110 || has_row q8 || has_row q4k || has_row batch; then
  [ -f "$TOK32K" ] || { echo "bench_vs_llamacpp: no 32000-token tokenizer at $TOK32K" >&2; exit 1; }
  [ -f s110.bin ] || "$PY" "$ROOT/scripts/make_llama2c_checkpoint.py" --shape stories110m --out s110.bin
  [ -f s110.gguf ] || "$LLAMA/llama-convert-llama2c-to-ggml" --copy-vocab-from-model "$TOK32K" \
      --llama2c-model s110.bin --llama2c-output-model s110.gguf >convert.log 2>&1
fi
if has_row q4k; then
  [ -f s110-q4_k_m.gguf ] || "$LLAMA/llama-quantize" s110.gguf s110-q4_k_m.gguf Q4_K_M >>quantize.log 2>&1
fi
if has_row q8 || has_row batch; then
  [ -f s110-q8_0.gguf ] || "$LLAMA/llama-quantize" s110.gguf s110-q8_0.gguf Q8_0 >quantize.log 2>&1
  [ -d s110-q8 ] || "$KVFOLD" convert --llama2c s110.bin --out s110-q8 --dtype q8 >/dev/null
fi
if has_row long; then
  [ -f "$S260/stories260K.bin" ] || { echo "bench_vs_llamacpp: no stories260K at $S260" >&2; exit 1; }
  [ -f s260.gguf ] || "$LLAMA/llama-convert-llama2c-to-ggml" --copy-vocab-from-model "$S260/tok512.bin" \
      --llama2c-model "$S260/stories260K.bin" --llama2c-output-model s260.gguf >>convert.log 2>&1
fi

# ---- Interleaved runs: results/<row>.<engine>.<rep>.json ----
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
mkdir -p results
rm -f results/*.json
run_pair() {  # name, reps, kvfold bench args..., --, llama-bench args...
  local name="$1" reps="$2"; shift 2
  local kv=() ll=()
  while [ "$1" != "--" ]; do kv+=("$1"); shift; done
  shift
  ll=("$@")
  for rep in $(seq 1 "$reps"); do
    "$BENCH" --no-big --no-gemm --modes full --prefill-warmup "${kv[@]}" >"results/$name.kvfold.$rep.json" 2>/dev/null
    "$LLAMA/llama-bench" -r 1 -o json "${ll[@]}" >"results/$name.llama.$rep.json" 2>/dev/null
  done
}
for t in ${THREADS//,/ }; do
  if has_row s110; then
    run_pair "s110_f32_t$t" "$REPS" --stories s110.bin --contexts 1,128 --decode-steps 32 --threads "$t" \
      -- -m s110.gguf -p 128 -n 32 -t "$t"
  fi
  if has_row q8; then
    run_pair "s110_q8_t$t" "$REPS" --stories s110-q8 --contexts 1,128 --decode-steps 32 --threads "$t" \
      -- -m s110-q8_0.gguf -p 128 -n 32 -t "$t"
  fi
  if has_row q4k; then  # the same file on both sides; kvfold holds it as Q8
    run_pair "s110_q4k_t$t" "$REPS" --stories s110-q4_k_m.gguf --contexts 1,128 --decode-steps 32 \
      --threads "$t" -- -m s110-q4_k_m.gguf -p 128 -n 32 -t "$t"
  fi
done
# Batched decode: one and 16 sequences, each side's JSON per rep (llama-batched-bench's
# JSON lines gathered into one array).
run_batch_pair() {  # name, reps, kvfold model, llama.cpp model, threads
  local name="$1" reps="$2" kv_model="$3" ll_model="$4" t="$5"
  for rep in $(seq 1 "$reps"); do
    "$BENCH" --no-big --no-gemm --modes full --stories "$kv_model" --contexts 8 --decode-steps 128 \
      --batch-sizes 1,16 --batch-rounds 3 --batch-prompt-tokens 8 --kv-dtypes f16 --threads "$t" \
      >"results/$name.kvfold.$rep.json" 2>/dev/null
    "$LLAMA/llama-batched-bench" -m "$ll_model" -c 4096 -npp 8 -ntg 128 -npl 1,16 -t "$t" \
      --output-format jsonl 2>/dev/null |
      "$PY" -c 'import json, sys; print(json.dumps([json.loads(l) for l in sys.stdin if l.startswith("{")]))' \
      >"results/$name.llama.$rep.json"
  done
}
if has_row batch; then
  for t in ${THREADS//,/ }; do
    run_batch_pair "batch_f32_t$t" "$REPS" s110.bin s110.gguf "$t"
    run_batch_pair "batch_q8_t$t" "$REPS" s110-q8 s110-q8_0.gguf "$t"
  done
fi
if has_row long; then
  for t in ${THREADS//,/ }; do
    run_pair "s260_10k_t$t" "$LONG_REPS" --stories "$S260/stories260K.bin" --contexts 10240 --decode-steps 1 \
      --threads "$t" -- -m s260.gguf -p 10240 -n 0 -t "$t"
  done
fi
# The commit of the binaries measured: llama-bench's own build_commit (in its JSON), else
# the git checkout the binaries were built in, else "unknown".
COMMIT=""
for d in "$LLAMA/.." "$LLAMA/../.."; do
  [ -n "$COMMIT" ] || COMMIT=$(git -C "$d" rev-parse --short=9 HEAD 2>/dev/null || true)
done
echo "load average before: $LOAD_BEFORE; after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" "$ROOT/scripts/bench_vs_llamacpp_table.py" results "${COMMIT:-unknown}"
