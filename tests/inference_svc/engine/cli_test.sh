#!/bin/sh
# End-to-end checks of the engine CLI commands on stories260K (skipped, exit 77, without
# the shared models): generate reproduces the reference greedy text; convert keeps the
# fingerprint; logits via decode and --prefill are bit-identical (f32 and --kv-dtype int8,
# which differs from f32); a logit bias bans tokens and penalties change the text; bad
# input exits 2.
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
# A SentencePiece tokenizer is copied as tokenizer.model, where the lookup finds it.
"$KVFOLD" convert --llama2c "$S/stories260K.bin" --out "$T/hf_sp" --tokenizer "$S/tok512.model" > /dev/null
test -f "$T/hf_sp/tokenizer.model"
"$KVFOLD" tokenize --model "$T/hf_sp" --text "Once upon a time" > "$T/ids_sp"
"$KVFOLD" tokenize --tokenizer "$S/tok512.model" --text "Once upon a time" > "$T/ids_ref"
cmp "$T/ids_sp" "$T/ids_ref"
"$KVFOLD" generate --model "$T/hf" --prompt "Once upon a time" --max-new-tokens 20 --json \
  --mode sink --window 16 --sink 2 --temperature 0.8 --top-p 0.9 --seed 3 > "$T/gen.json"
grep -q '"generated_tokens":20' "$T/gen.json"

"$KVFOLD" logits --model "$T/hf" --tokens 1,403,407,261,378,275,395,301 --out "$T/a.bin"
"$KVFOLD" logits --model "$T/hf" --tokens 1,403,407,261,378,275,395,301 --out "$T/b.bin" --prefill
cmp "$T/a.bin" "$T/b.bin"
"$KVFOLD" logits --model "$T/hf" --tokens 1,403,407 --out "$T/c.bin" --backend cpu-ref --mode sliding --window 2
test "$(wc -c < "$T/c.bin")" -eq $((3 * 512 * 4))
# INT8 KV: prefill == decode bitwise, and really different from the f32 cache (20 tokens:
# blocks of 16 get quantized).
IDS=1,403,407,261,378,275,395,301,403,407,261,378,275,395,301,403,407,261,378,275
"$KVFOLD" logits --model "$T/hf" --tokens $IDS --out "$T/i8a.bin" --kv-dtype int8
"$KVFOLD" logits --model "$T/hf" --tokens $IDS --out "$T/i8b.bin" --kv-dtype int8 --prefill
"$KVFOLD" logits --model "$T/hf" --tokens $IDS --out "$T/f32.bin" --kv-dtype f32
cmp "$T/i8a.bin" "$T/i8b.bin"
if cmp -s "$T/i8a.bin" "$T/f32.bin"; then echo "int8 logits equal f32"; exit 1; fi
"$KVFOLD" generate --model "$T/hf" --prompt "Once upon a time" --max-new-tokens 20 --json \
  --mode sink --window 16 --sink 2 --kv-dtype int8 > "$T/gen8.json"
grep -q '"generated_tokens":20' "$T/gen8.json"

# A logit bias of -100 bans tokens that the greedy text uses; penalties change the text.
ids() { grep -o '"token_ids":\[[0-9,]*\]' "$1" | tr -c '0-9\n' ' ' | sed 's/^ *//'; }
"$KVFOLD" generate --model "$T/hf" --prompt "Once upon a time" --max-new-tokens 30 --json > "$T/plain.json"
BANNED=$(ids "$T/plain.json" | tr ' ' '\n' | grep -v '^$' | sort | uniq -c | sort -rn | head -2 | awk '{print $2}')
test -n "$BANNED"
BIAS=$(for id in $BANNED; do printf '%s=-100,' "$id"; done | sed 's/,$//')
"$KVFOLD" generate --model "$T/hf" --prompt "Once upon a time" --max-new-tokens 30 --json \
  --logit-bias "$BIAS" > "$T/biased.json"
for id in $BANNED; do
  if ids "$T/biased.json" | tr ' ' '\n' | grep -qx "$id"; then echo "banned $id generated"; exit 1; fi
done
"$KVFOLD" generate --model "$T/hf" --prompt "Once upon a time" --max-new-tokens 30 --json \
  --frequency-penalty 1 --presence-penalty 0.5 --repetition-penalty 1.2 > "$T/penalised.json"
test "$(ids "$T/penalised.json")" != "$(ids "$T/plain.json")"

# Random model directories load; bad input is exit code 2 with a message.
"$MRM" --shape tiny-odd --out "$T/rand" --seed 1 --dtype bf16 > /dev/null
"$KVFOLD" info --model "$T/rand" > /dev/null
set +e
"$KVFOLD" logits --model "$T/rand" --tokens 1,999 --out "$T/x.bin" 2> /dev/null; rc1=$?
head -c 100 "$S/stories260K.bin" > "$T/trunc.bin"
"$KVFOLD" info --model "$T/trunc.bin" 2> "$T/trunc.err"; rc2=$?
"$KVFOLD" logits --model "$T/hf" --tokens 1 --out "$T/x.bin" --kv-dtype fp8 2> "$T/dtype.err"; rc3=$?
# A tokenizer that does not load is refused before anything is written.
cp "$S/tok512.bin" "$T/not_sp.model"
"$KVFOLD" convert --llama2c "$S/stories260K.bin" --out "$T/hf_bad" --tokenizer "$T/not_sp.model" 2> /dev/null; rc4=$?
"$KVFOLD" generate --model "$T/hf" --max-new-tokens 1 --logit-bias 600=1 2> "$T/bias.err"; rc5=$?
"$KVFOLD" generate --model "$T/hf" --max-new-tokens 1 --frequency-penalty 3 2> "$T/pen.err"; rc6=$?
set -e
test "$rc5" -eq 2
grep -q "token id 600 outside \[0, 512)" "$T/bias.err"
test "$rc6" -eq 2
grep -q "frequency_penalty must be in \[-2, 2\], got 3" "$T/pen.err"
test "$rc4" -eq 2
test ! -e "$T/hf_bad"
test "$rc1" -eq 2
test "$rc2" -eq 2
test "$rc3" -eq 2
grep -q "KV dtype f8 is not supported (expected f32, f16 or int8)" "$T/dtype.err"
grep -q truncated "$T/trunc.err"
echo "cli_test: all checks passed"
