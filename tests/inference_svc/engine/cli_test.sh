#!/bin/sh
# End-to-end checks of the engine CLI commands on stories260K (skipped, exit 77, without
# the shared models): generate reproduces the reference greedy text; convert keeps the
# fingerprint; logits via decode and --prefill are bit-identical; bad input exits 2.
set -eu
KVFOLD="$1"
MRM="$2"
SHARED="${KVFOLD_SHARED_DIR:-${KVFOLD_SOURCE_DIR:-.}/../shared}"
S="$SHARED/models/stories260K"
if [ ! -f "$S/stories260K.bin" ]; then echo "skip: no $S"; exit 77; fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

"$KVFOLD" generate --model "$S/stories260K.bin" --tokenizer "$S/tok512.bin" \
  --max-new-tokens 200 > "$T/gen.txt" 2> "$T/gen.err"
# The reference file ends with blank lines; generate prints one newline after the text.
printf '%s\n' "$(cat "$S/greedy_from_bos_200.txt")" > "$T/expected.txt"
cmp "$T/gen.txt" "$T/expected.txt"

# The tokenizer is found next to a converted model.
"$KVFOLD" convert --llama2c "$S/stories260K.bin" --out "$T/hf" --tokenizer "$S/tok512.bin" > /dev/null
"$KVFOLD" info --model "$S/stories260K.bin" --json | grep model_fingerprint > "$T/fp1"
"$KVFOLD" info --model "$T/hf" --json | grep model_fingerprint > "$T/fp2"
cmp "$T/fp1" "$T/fp2"
"$KVFOLD" generate --model "$T/hf" --prompt "Once upon a time" --max-new-tokens 20 --json \
  --mode sink --window 16 --sink 2 --temperature 0.8 --top-p 0.9 --seed 3 > "$T/gen.json"
grep -q '"generated_tokens":20' "$T/gen.json"

"$KVFOLD" logits --model "$T/hf" --tokens 1,403,407,261,378,275,395,301 --out "$T/a.bin"
"$KVFOLD" logits --model "$T/hf" --tokens 1,403,407,261,378,275,395,301 --out "$T/b.bin" --prefill
cmp "$T/a.bin" "$T/b.bin"
"$KVFOLD" logits --model "$T/hf" --tokens 1,403,407 --out "$T/c.bin" --backend cpu-ref --mode sliding --window 2
test "$(wc -c < "$T/c.bin")" -eq $((3 * 512 * 4))

# Random model directories load; bad input is exit code 2 with a message.
"$MRM" --shape tiny-odd --out "$T/rand" --seed 1 --dtype bf16 > /dev/null
"$KVFOLD" info --model "$T/rand" > /dev/null
set +e
"$KVFOLD" logits --model "$T/rand" --tokens 1,999 --out "$T/x.bin" 2> /dev/null; rc1=$?
head -c 100 "$S/stories260K.bin" > "$T/trunc.bin"
"$KVFOLD" info --model "$T/trunc.bin" 2> "$T/trunc.err"; rc2=$?
set -e
test "$rc1" -eq 2
test "$rc2" -eq 2
grep -q truncated "$T/trunc.err"
echo "cli_test: all checks passed"
