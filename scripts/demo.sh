#!/usr/bin/env bash
# kvfold's main job: one long session served by two inference replicas that share one
# memory store, resumed across replicas and across a killed replica.
#
#   scripts/demo.sh [--model DIR] [--turns N]
#
# Finds stories260K (--model, $KVFOLD_MODEL_DIR, ../shared/models/stories260K, else
# downloads it and checks its sha256), uses the trained projector in
# models/stories260K-projector (or a clearly labelled RANDOM one until it exists), starts
# kvfold-memory and two kvfold-inference replicas on 127.0.0.1 (free ports), runs the
# session in memory mode alternating replicas, kills one replica mid-turn, continues on
# the other, restarts it, and prints the text, block size, versions and KV bytes saved.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${KVFOLD_BUILD_DIR:-build}"
MODEL_DIR="${KVFOLD_MODEL_DIR:-}"
TURNS=10
while (($#)); do
  case "$1" in
    --model) MODEL_DIR="$2"; shift 2 ;;
    --model=*) MODEL_DIR="${1#*=}"; shift ;;
    --turns) TURNS="$2"; shift 2 ;;
    --turns=*) TURNS="${1#*=}"; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "demo: unknown argument $1" >&2; exit 2 ;;
  esac
done

MEMORY_BIN="$BUILD_DIR/memory_svc/kvfold-memory"
INFERENCE_BIN="$BUILD_DIR/inference_svc/service/kvfold-inference"
KVFOLD_BIN="$BUILD_DIR/tools/kvfold/kvfold"
PROJECTOR_TOOL="$BUILD_DIR/tools/make_random_projector/make_random_projector"
if [ ! -x "$MEMORY_BIN" ] || [ ! -x "$INFERENCE_BIN" ] || [ ! -x "$KVFOLD_BIN" ] || [ ! -x "$PROJECTOR_TOOL" ]; then
  echo "demo: build missing, running scripts/setup.sh"
  scripts/setup.sh
fi

# ---- the model -----------------------------------------------------------------------
MODEL_SHA=b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696
TOK_SHA=037cb335abb25d1fa9e8ecae30ed2a3a8ace9302862ebcdc05d51a6bbb10c312
if [ -z "$MODEL_DIR" ] && [ -f "$ROOT/../shared/models/stories260K/stories260K.bin" ]; then
  MODEL_DIR="$ROOT/../shared/models/stories260K"
fi
if [ -z "$MODEL_DIR" ]; then
  MODEL_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/kvfold/stories260K"
  mkdir -p "$MODEL_DIR"
  base=https://huggingface.co/karpathy/tinyllamas/resolve/main/stories260K
  for f in stories260K.bin tok512.bin; do
    if [ ! -f "$MODEL_DIR/$f" ]; then
      echo "demo: downloading $f"
      curl -fsSL -o "$MODEL_DIR/$f.part" "$base/$f"
      mv "$MODEL_DIR/$f.part" "$MODEL_DIR/$f"
    fi
  done
fi
check_sha() {
  local got
  got="$(sha256sum "$1" | cut -d' ' -f1)"
  if [ "$got" != "$2" ]; then echo "demo: $1 has sha256 $got, expected $2" >&2; exit 1; fi
}
check_sha "$MODEL_DIR/stories260K.bin" "$MODEL_SHA"
check_sha "$MODEL_DIR/tok512.bin" "$TOK_SHA"
MODEL="$MODEL_DIR/stories260K.bin"
TOKENIZER="$MODEL_DIR/tok512.bin"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kvfold-demo.XXXXXX")"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

# ---- the projector ---------------------------------------------------------------------
PROJECTOR="$ROOT/models/stories260K-projector"
PROJECTOR_LABEL="trained (models/stories260K-projector)"
if [ ! -f "$PROJECTOR/projector.json" ]; then
  PROJECTOR="$WORK/projector-random"
  "$PROJECTOR_TOOL" --model "$MODEL" --out "$PROJECTOR" --mem-slots 16 --window 64 --chunk 32 \
    --heads 8 --seed 1 > "$WORK/projector.log" 2>&1
  PROJECTOR_LABEL="RANDOM, UNTRAINED (models/stories260K-projector does not exist yet): text after a fold is not meaningful"
fi

# ---- the cluster -----------------------------------------------------------------------
. "$ROOT/scripts/lib/wait_line.sh"
# A local demo on loopback: no tokens, and the servers are told so explicitly.
"$MEMORY_BIN" --listen 127.0.0.1:0 --db-dir "$WORK/db" --insecure-no-auth > "$WORK/memory.out" 2> "$WORK/memory.log" &
PIDS+=($!)
STORE="$(wait_line "$WORK/memory.out" $! "listening on ")"

declare -A ADDR PID
start_replica() {
  # Emptied here, before the fork: a restarted replica's wait must not read the address
  # its previous run wrote (the child truncates the file only once it runs).
  : > "$WORK/$1.out"
  "$INFERENCE_BIN" --model "$MODEL" --tokenizer "$TOKENIZER" --projector "$PROJECTOR" \
    --memory-store "$STORE" --listen 127.0.0.1:0 --threads 1 --replica-name "$1" \
    --default-mode memory --insecure-no-auth > "$WORK/$1.out" 2> "$WORK/$1.log" &
  PID[$1]=$!
  PIDS+=($!)
  ADDR[$1]="$(wait_line "$WORK/$1.out" $! "listening on ")"
}
start_replica A
start_replica B
echo "== kvfold demo"
echo "model      $MODEL"
echo "projector  $PROJECTOR_LABEL"
echo "store      kvfold-memory on $STORE"
echo "replicas   A on ${ADDR[A]}, B on ${ADDR[B]}"
echo

PROMPTS=(
  "Once upon a time, there was a little girl named Lily."
  "She had a red ball that she loved very much."
  "One day, Lily went to the park with her mom."
  "At the park, she saw a big dog."
  "The dog wanted to play with the ball."
  "Lily was scared, but her mom said it was okay."
  "They played together all afternoon."
  "When the sun went down, they went home."
  "Lily told her dad about the dog."
  "The next day, she went back to the park."
  "The dog was there again, waiting for her."
  "They became best friends."
)

SESSION=demo-session
"$KVFOLD_BIN" sessions ls --target "${ADDR[A]}" > /dev/null  # both replicas see the store
python_json() { /usr/bin/python3 -c "import json,sys; d=json.loads(sys.stdin.read()); u=d.get('usage', {}); print($1)"; }

turn() {  # replica prompt [max_new]
  local replica="$1" prompt="$2" max_new="${3:-48}" out="$WORK/turn.out"
  if ! "$KVFOLD_BIN" chat --target "${ADDR[$replica]}" --session "$SESSION" --prompt "$prompt" \
      --max-new-tokens "$max_new" --json > "$out" 2> "$WORK/turn.err"; then
    echo "[$replica] turn failed: $(tail -1 "$WORK/turn.err")"
    return 1
  fi
  local final text
  final="$(tail -1 "$out")"
  text="$(head -n -1 "$out")"
  printf '[%s] user: %s\n[%s] model: %s\n' "$replica" "$prompt" "$replica" "$text"
  echo "$final" | python_json '"      (v%s written by %s, %s, folded %s, prompt %s + generated %s tokens, ttft %.1f ms)" % (u["memoryVersion"], u["replica"], "restored from the store" if u["restoredFromStore"] else "cached", u["tokensFolded"], u["promptTokens"], u["generatedTokens"], u["timings"]["timeToFirstTokenMs"])'
}

killed_at=$((TURNS / 2))
for ((t = 0; t < TURNS; t++)); do
  prompt="${PROMPTS[$((t % ${#PROMPTS[@]}))]}"
  if ((t % 2 == 0)); then replica=A; else replica=B; fi
  if ((t == killed_at)); then
    echo
    echo "== killing replica A (SIGKILL) in the middle of a turn"
    "$KVFOLD_BIN" chat --target "${ADDR[A]}" --session "$SESSION" --prompt "$prompt" \
      --max-new-tokens 4000 --ignore-eos > "$WORK/killed.out" 2> "$WORK/killed.err" &
    chat_pid=$!
    for _ in $(seq 1 200); do [ -s "$WORK/killed.out" ] && break; sleep 0.01; done
    kill -9 "${PID[A]}" 2>/dev/null || true
    wait "$chat_pid" 2>/dev/null && echo "   (the turn finished before the kill)" \
      || echo "   the turn in flight was lost: $(tail -1 "$WORK/killed.err")"
    head="$("$KVFOLD_BIN" sessions show "$SESSION" --target "${ADDR[B]}" --json | python_json 'd["headVersion"]')"
    echo "   store head is still v$head; continuing on replica B"
    echo
    turn B "$prompt"
    echo
    echo "== restarting replica A"
    start_replica A
    echo "   A is back on ${ADDR[A]}"
    echo
    continue
  fi
  turn "$replica" "$prompt"
done

echo
echo "== session summary"
"$KVFOLD_BIN" sessions show "$SESSION" --target "${ADDR[B]}" --json > "$WORK/session.json"
/usr/bin/python3 - "$WORK/session.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
total = int(s.get("totalTokens", 0))
resident = int(s.get("residentTokens", 0))
kv = int(s.get("kvBytesResident", 0))
per_token = kv // resident if resident else 0
full = total * per_token
print(f"tokens in the session      {total} ({int(s.get('tokensFolded', 0))} folded into memory)")
print(f"memory block size          {int(s.get('memoryBlockBytes', 0))} B payload (+ the window's token ids in the header)")
print(f"versions written           {int(s.get('headVersion', 0))} (head v{int(s.get('headVersion', 0))})")
print(f"KV resident (memory mode)  {kv} B for {resident} entries ({per_token} B/token)")
print(f"KV for full attention      {full} B for {total} tokens")
if full:
    print(f"KV bytes saved             {full - kv} B ({100.0 * (full - kv) / full:.1f} %)")
PY
echo
echo "== shutting down"
