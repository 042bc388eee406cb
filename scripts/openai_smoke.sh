#!/usr/bin/env bash
# The official OpenAI Node client against kvfold's HTTP API: a store and two replicas
# (stories260K + a projector, as scripts/demo.sh runs them), then with the `openai` npm
# package: list models, stream a chat completion, chain three responses alternating
# replicas via previous_response_id, fork from the first response, get log-probabilities
# (chat, streamed chat, completions), structured output (response_format / text.format
# json_schema), function calling (chat: tools, streamed calls, tool results, $defs and
# strict: false tools, the deprecated functions form; responses: function_call items and
# their output), count input tokens, get a 401 and 400s.
# Stops every process it started; exits 0 when all checks pass, 77 (skipped) when the
# model, node or the npm package is unavailable, 1 on a failed check.
#
#   scripts/openai_smoke.sh [--model DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${KVFOLD_BUILD_DIR:-build}"
MODEL_DIR="${KVFOLD_MODEL_DIR:-}"
while (($#)); do
  case "$1" in
    --model) MODEL_DIR="$2"; shift 2 ;;
    --model=*) MODEL_DIR="${1#*=}"; shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "openai_smoke: unknown argument $1" >&2; exit 2 ;;
  esac
done
skip() { echo "openai_smoke: SKIPPED: $*"; exit 77; }

MEMORY_BIN="$BUILD_DIR/memory_svc/kvfold-memory"
INFERENCE_BIN="$BUILD_DIR/inference_svc/service/kvfold-inference"
PROJECTOR_TOOL="$BUILD_DIR/tools/make_random_projector/make_random_projector"
for b in "$MEMORY_BIN" "$INFERENCE_BIN" "$PROJECTOR_TOOL"; do
  [ -x "$b" ] || { echo "openai_smoke: $b not built (run scripts/setup.sh)" >&2; exit 1; }
done
if [ -z "$MODEL_DIR" ] && [ -f "$ROOT/../shared/models/stories260K/stories260K.bin" ]; then
  MODEL_DIR="$ROOT/../shared/models/stories260K"
fi
[ -n "$MODEL_DIR" ] && [ -f "$MODEL_DIR/stories260K.bin" ] ||
  skip "stories260K not found (--model DIR, \$KVFOLD_MODEL_DIR or ../shared/models)"
command -v node > /dev/null && command -v npm > /dev/null || skip "node/npm not installed"
MODEL="$MODEL_DIR/stories260K.bin"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kvfold-openai.XXXXXX")"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

# The official client, in a scratch folder.
mkdir -p "$WORK/node"
(cd "$WORK/node" && npm init -y > /dev/null &&
  timeout 300 npm install --silent --no-audit --no-fund openai@7 > "$WORK/npm.log" 2>&1) ||
  skip "npm install openai failed (registry unreachable?): $(tail -3 "$WORK/npm.log" 2>/dev/null)"

. "$ROOT/scripts/lib/wait_line.sh"

"$PROJECTOR_TOOL" --model "$MODEL" --out "$WORK/projector" --mem-slots 16 --window 64 --chunk 32 \
  --heads 8 --seed 1 > "$WORK/projector.log" 2>&1
echo "sk-kvfold-smoke tenant-smoke" > "$WORK/tokens"
"$MEMORY_BIN" --listen 127.0.0.1:0 --db-dir "$WORK/db" --insecure-no-auth > "$WORK/memory.out" 2> "$WORK/memory.log" &
PIDS+=($!)
STORE="$(wait_line "$WORK/memory.out" $! "listening on ")"
declare -A HTTP
for r in A B; do
  "$INFERENCE_BIN" --model "$MODEL" --projector "$WORK/projector" --memory-store "$STORE" \
    --listen 127.0.0.1:0 --threads 1 --replica-name "$r" --default-mode memory \
    --tokens-file "$WORK/tokens" --http-port 0 > "$WORK/$r.out" 2> "$WORK/$r.log" &
  PIDS+=($!)
  wait_line "$WORK/$r.out" $! "listening on " > /dev/null
  HTTP[$r]="$(wait_line "$WORK/$r.out" $! "http api on ")"
done
CLIENT_VERSION="$(cd "$WORK/node" &&
  node -p 'JSON.parse(require("fs").readFileSync("node_modules/openai/package.json")).version')"
echo "openai_smoke: store $STORE, replica A http://${HTTP[A]}, replica B http://${HTTP[B]}," \
  "openai $CLIENT_VERSION"

cat > "$WORK/node/smoke.mjs" <<'EOF'
import OpenAI from "openai";
const [a, b] = process.argv.slice(2);
const key = "sk-kvfold-smoke";
const A = new OpenAI({ baseURL: `http://${a}/v1`, apiKey: key, maxRetries: 0 });
const B = new OpenAI({ baseURL: `http://${b}/v1`, apiKey: key, maxRetries: 0 });
const check = (ok, what) => {
  if (!ok) { console.error(`FAIL: ${what}`); process.exit(1); }
  console.log(`ok   ${what}`);
};

const models = await A.models.list();
const model = models.data[0]?.id;
check(model === "stories260K", `models.list -> ${model}`);
const retrieved = await A.models.retrieve(model);
check(retrieved.id === model && retrieved.object === "model", `models.retrieve -> ${retrieved.id}`);

const stream = await A.chat.completions.create({
  model, stream: true, stream_options: { include_usage: true }, max_tokens: 24, temperature: 0,
  messages: [{ role: "system", content: "Tell a story." }, { role: "user", content: "A cat" }],
});
let text = "", chunks = 0, usage = null;
for await (const chunk of stream) {
  chunks++;
  text += chunk.choices[0]?.delta?.content ?? "";
  if (chunk.usage) usage = chunk.usage;
}
check(chunks > 2 && text.length > 0 && usage?.completion_tokens > 0,
      `streamed chat completion: ${chunks} chunks, ${usage?.completion_tokens} tokens: ${JSON.stringify(text)}`);

const lp = await B.chat.completions.create({
  model, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 3,
  messages: [{ role: "user", content: "A dog" }],
});
const content = lp.choices[0].logprobs?.content ?? [];
check(content.length === lp.usage.completion_tokens &&
      content.every((t) => t.top_logprobs.length === 3 && t.logprob <= 0 &&
                           t.top_logprobs[0].token === t.token &&
                           t.top_logprobs[0].logprob >= t.top_logprobs[2].logprob),
      `chat logprobs: ${content.length} tokens, first ${JSON.stringify(content[0]?.token)} ` +
      `${content[0]?.logprob.toFixed(4)}, alternatives sorted`);
const streamedLp = await B.chat.completions.create({
  model, max_tokens: 8, temperature: 0, logprobs: true, stream: true,
  messages: [{ role: "user", content: "A dog" }],
});
const streamedTokens = [];
for await (const chunk of streamedLp) {
  for (const t of chunk.choices[0]?.logprobs?.content ?? []) streamedTokens.push(t.token);
}
check(streamedTokens.join("") === content.map((t) => t.token).join(""),
      `streamed chat logprobs: the same ${streamedTokens.length} tokens`);
const cmpl = await A.completions.create({ model, prompt: "Once upon a time", max_tokens: 4,
                                          temperature: 0, logprobs: 2 });
check(cmpl.choices[0].logprobs?.token_logprobs?.length === 4,
      `completion logprobs: ${JSON.stringify(cmpl.choices[0].logprobs?.token_logprobs)}`);
// A scoring request (echo, logprobs, max_tokens 0): the prompt back, its first token null,
// every later one a log-probability, nothing generated.
const scored = await B.completions.create({ model, prompt: "Once upon a time", max_tokens: 0,
                                            echo: true, logprobs: 1 });
const scores = scored.choices[0].logprobs?.token_logprobs ?? [];
check(scored.choices[0].text === "Once upon a time" && scores.length === scored.usage.prompt_tokens &&
        scores[0] === null && scores.slice(1).every((v) => typeof v === "number" && v <= 0) &&
        scored.usage.completion_tokens === 0,
      `echoed prompt scored: ${JSON.stringify(scored.choices[0])}`);
try {
  await A.chat.completions.create({ model, logprobs: true, top_logprobs: 21,
                                    messages: [{ role: "user", content: "hi" }] });
  check(false, "top_logprobs 21 is refused");
} catch (e) {
  check(e.status === 400 && e.param === "top_logprobs",
        `top_logprobs 21 -> ${e.status} (param ${e.param}): ${e.error?.message ?? e.message}`);
}

const chat = { model, max_tokens: 32, temperature: 0, messages: [{ role: "user", content: "A dog" }] };
const unpenalised = (await A.chat.completions.create(chat)).choices[0].message.content;
const penalties = { frequency_penalty: 1.0, presence_penalty: 0.5 };
const penalised = (await B.chat.completions.create({ ...chat, ...penalties })).choices[0].message.content;
const again = (await A.chat.completions.create({ ...chat, ...penalties })).choices[0].message.content;
check(penalised !== unpenalised && penalised === again,
      `penalties change the greedy answer, the same on both replicas: ${JSON.stringify(penalised)}`);
// A bias of 100 forces one token: every generated token is it.
const forced = await A.chat.completions.create({ ...chat, max_tokens: 8, logprobs: true,
                                                 logit_bias: { "13": 100 }, min_p: 0.1 });
const forcedTokens = (forced.choices[0].logprobs?.content ?? []).map((t) => t.token);
check(forcedTokens.length === 8 && forcedTokens.every((t) => t === forcedTokens[0]),
      `logit_bias 13 = +100 forces one token 8 times: ${JSON.stringify(forcedTokens[0])}`);
try {
  await A.chat.completions.create({ ...chat, logit_bias: { "100000": 1 } });
  check(false, "a logit_bias id outside the vocabulary is refused");
} catch (e) {
  check(e.status === 400, `logit_bias id 100000 -> ${e.status}: ${e.error?.message ?? e.message}`);
}
try {
  await A.chat.completions.create({ ...chat, frequency_penalty: 2.5 });
  check(false, "frequency_penalty 2.5 is refused");
} catch (e) {
  check(e.status === 400 && e.param === "frequency_penalty",
        `frequency_penalty 2.5 -> ${e.status} (param ${e.param}): ${e.error?.message ?? e.message}`);
}

const r1 = await A.responses.create({ model, input: "Once upon a time", max_output_tokens: 16,
                                      temperature: 0 });
check(r1.id.startsWith("resp_") && r1.output_text.length > 0, `response 1 on A: ${r1.id}`);
const streamedResponse = await B.responses.create({ model, input: "Once upon a time",
                                                    max_output_tokens: 16, temperature: 0,
                                                    stream: true });
let deltas = "", types = [], lastEvent = null;
for await (const event of streamedResponse) {
  types.push(event.type);
  if (event.type === "response.output_text.delta") deltas += event.delta;
  lastEvent = event;
}
check(deltas === r1.output_text && types[0] === "response.created" &&
      lastEvent.response?.id?.startsWith("resp_") && lastEvent.response.output_text === undefined,
      `streamed response on B: ${types.length} events, ${types[0]} .. ${types.at(-1)}, ` +
      `the unstreamed text`);
const helper = A.responses.stream({ model, input: "Once upon a time", max_output_tokens: 16,
                                    temperature: 0 });
const final = await helper.finalResponse();
check(final.output[0]?.content[0]?.text === r1.output_text && final.id.startsWith("resp_"),
      `responses.stream() helper on A: final ${final.id}, the unstreamed text`);
const r2 = await B.responses.create({ model, input: "Then?", previous_response_id: r1.id,
                                      max_output_tokens: 16, temperature: 0 });
check(r2.previous_response_id === r1.id, `response 2 on B continues ${r1.id}: ${r2.id}`);
const r3 = await A.responses.create({ model, input: "The end?", previous_response_id: r2.id,
                                      max_output_tokens: 16, temperature: 0 });
check(r3.previous_response_id === r2.id, `response 3 on A continues ${r2.id}: ${r3.id}`);
const fork = await B.responses.create({ model, input: "Then?", previous_response_id: r1.id,
                                        max_output_tokens: 16, temperature: 0 });
check(fork.id !== r2.id && fork.output_text === r2.output_text,
      `fork from ${r1.id} on B: ${fork.id} (same greedy answer as response 2)`);
const kept = await A.responses.retrieve(r2.id);  // the client adds output_text to created ones only
check(kept.id === r2.id && kept.output[0]?.content[0]?.text === r2.output_text &&
      kept.previous_response_id === r1.id && kept.usage.output_tokens === r2.usage.output_tokens,
      `responses.retrieve(${r2.id}) on A: the response as created on B`);
const inputItems = [];
for await (const item of A.responses.inputItems.list(r1.id, { limit: 1, order: "asc" })) {
  inputItems.push(item);
}
check(inputItems.length === 1 && inputItems[0].type === "message" &&
      inputItems[0].content[0].text === "Once upon a time",
      `responses.inputItems.list(${r1.id}): ${JSON.stringify(inputItems)}`);
const counted = await B.responses.inputTokens.count({ model, input: "The end?",
                                                      previous_response_id: r2.id });
const countedFirst = await A.responses.inputTokens.count({ model, input: "Once upon a time" });
check(counted.object === "response.input_tokens" &&
        counted.input_tokens === r3.usage.input_tokens &&
        countedFirst.input_tokens === r1.usage.input_tokens,
      `responses.inputTokens.count: ${countedFirst.input_tokens} and ${counted.input_tokens}, ` +
      `the usage.input_tokens of responses 1 and 3`);
try {
  await A.responses.create({ model, input: "x", conversation: "conv_1" });
  check(false, "a conversation is refused");
} catch (e) {
  check(e.status === 400 && e.param === "conversation",
        `responses.create with a conversation -> ${e.status} (param ${e.param})`);
}
try {
  await A.responses.retrieve("resp_1_no-such-session");
  check(false, "an unknown response is refused");
} catch (e) {
  check(e.status === 404, `responses.retrieve of an unknown id -> ${e.status}`);
}

const wrong = new OpenAI({ baseURL: `http://${a}/v1`, apiKey: "sk-wrong", maxRetries: 0 });
try {
  await wrong.models.list();
  check(false, "a wrong key is refused");
} catch (e) {
  check(e.status === 401, `wrong key -> ${e.status} ${e.error?.type ?? ""}`);
}
// Several choices: n seeded samples (choice i = the n = 1 answer with seed + i), and a batch
// of prompts with each prompt's choices at i * n .. i * n + n - 1.
const sampled = await A.chat.completions.create({ ...chat, max_tokens: 16, temperature: 1,
                                                  seed: 5, n: 3 });
const alone = await B.chat.completions.create({ ...chat, max_tokens: 16, temperature: 1, seed: 6 });
check(sampled.choices.length === 3 && sampled.choices.every((c, i) => c.index === i) &&
        sampled.choices[1].message.content === alone.choices[0].message.content &&
        new Set(sampled.choices.map((c) => c.message.content)).size > 1,
      `chat n = 3 seed 5: choice 1 = seed 6 alone: ${JSON.stringify(alone.choices[0].message.content)}`);
const batch = await B.completions.create({ model, prompt: ["Once upon a time", "Lily"], n: 2,
                                           max_tokens: 6, temperature: 0 });
const lily = await A.completions.create({ model, prompt: "Lily", max_tokens: 6, temperature: 0 });
check(batch.choices.length === 4 && batch.choices[3].index === 3 &&
        batch.choices[2].text === lily.choices[0].text && batch.choices[3].text === lily.choices[0].text,
      `completions batch of 2 prompts, n = 2: choices 2 and 3 = "Lily" alone: ` +
      JSON.stringify(lily.choices[0].text));
try {
  await A.chat.completions.create({ model, n: 2, kvfold_session: "smoke-one-answer",
                                    messages: [{ role: "user", content: "hi" }] });
  check(false, "n = 2 on a kvfold session is refused");
} catch (e) {
  check(e.status === 400 && e.param === "n",
        `n = 2 on a kvfold session -> ${e.status} (param ${e.param}): ${e.error?.message ?? e.message}`);
}
// Structured output: a chat answer and a response held to a JSON Schema parse as documents
// of it.
const pet = { type: "object", additionalProperties: false, required: ["name", "kind"],
              properties: { name: { type: "string", minLength: 1, maxLength: 10 },
                            kind: { enum: ["cat", "dog"] }, age: { type: "integer" } } };
const isPet = (text) => {
  try {
    const doc = JSON.parse(text);
    return typeof doc.name === "string" && doc.name.length >= 1 && doc.name.length <= 10 &&
      ["cat", "dog"].includes(doc.kind) && (doc.age === undefined || Number.isInteger(doc.age)) &&
      Object.keys(doc).every((k) => ["name", "kind", "age"].includes(k));
  } catch {
    return false;
  }
};
const structured = await A.chat.completions.create({
  ...chat, max_tokens: 120, temperature: 1, seed: 9,
  response_format: { type: "json_schema", json_schema: { name: "pet", schema: pet, strict: true } } });
check(structured.choices[0].finish_reason === "stop" && isPet(structured.choices[0].message.content),
      `chat response_format json_schema: ${structured.choices[0].message.content}`);
const structuredResponse = await B.responses.create({
  model, input: "Tell me about a pet.", max_output_tokens: 120, temperature: 0,
  text: { format: { type: "json_schema", name: "pet", schema: pet, strict: true } } });
check(isPet(structuredResponse.output_text),
      `responses text.format json_schema: ${structuredResponse.output_text}`);
// A pattern, numeric bounds and a multiple, the pattern checked with JavaScript's own
// RegExp (ECMA-262, the dialect JSON Schema names); and a price under Pydantic's pattern
// for a Decimal (a negative lookahead).
const ticket = { type: "object", additionalProperties: false,
                 required: ["code", "seats", "fare", "price"],
                 properties: { code: { type: "string", pattern: "^[A-Z]{2}\\d{2,4}$" },
                               seats: { type: "integer", minimum: 1, maximum: 9 },
                               fare: { type: "integer", multipleOf: 5, minimum: 5, maximum: 95 },
                               price: { type: "string", maxLength: 8, pattern:
                                 "^(?!^[-+.]*$)[+-]?0*\\d*\\.?\\d*$" } } };
const ticketAnswer = await A.chat.completions.create({
  ...chat, max_tokens: 90, temperature: 1, seed: 4,
  response_format: { type: "json_schema", json_schema: { name: "ticket", schema: ticket } } });
const ticketDoc = JSON.parse(ticketAnswer.choices[0].message.content);
check(new RegExp(ticket.properties.code.pattern).test(ticketDoc.code) &&
      Number.isInteger(ticketDoc.seats) && ticketDoc.seats >= 1 && ticketDoc.seats <= 9 &&
      Number.isInteger(ticketDoc.fare) && ticketDoc.fare % 5 === 0 && ticketDoc.fare >= 5 &&
      ticketDoc.fare <= 95 && new RegExp(ticket.properties.price.pattern).test(ticketDoc.price),
      `json_schema with a pattern, bounds and a multiple: ${ticketAnswer.choices[0].message.content}`);
try {
  await A.chat.completions.create({ ...chat, response_format: { type: "json_schema",
    json_schema: { name: "p", schema: { type: "array", contains: { type: "integer" } } } } });
  check(false, "a schema with 'contains' is refused");
} catch (e) {
  check(e.status === 400 && /contains/.test(e.error?.message ?? e.message),
        `json_schema with contains -> ${e.status}: ${e.error?.message ?? e.message}`);
}
// strict: false reads past what cannot be held and names it in a header; the rest holds.
const digits = { type: "array", items: { type: "integer", minimum: 0, maximum: 9 }, minItems: 1,
                 maxItems: 3, contains: { const: 3 } };
const { data: lenient, response: lenientResponse } = await A.chat.completions.create({
  ...chat, max_tokens: 40, temperature: 1, seed: 3,
  response_format: { type: "json_schema", json_schema: { name: "digits", schema: digits, strict: false } },
}).withResponse();
const lenientDoc = JSON.parse(lenient.choices[0].message.content);
check(lenientResponse.headers.get("x-kvfold-schema-skipped") === `["contains at '/'"]` &&
      Array.isArray(lenientDoc) && lenientDoc.length >= 1 && lenientDoc.length <= 3 &&
      lenientDoc.every((d) => Number.isInteger(d) && d >= 0 && d <= 9),
      `strict: false -> ${lenient.choices[0].message.content}, skipped ` +
      `${lenientResponse.headers.get("x-kvfold-schema-skipped")}`);

// Function calling: a required call, the same streamed, and its result sent back.
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather in a city.",
  parameters: { type: "object", properties: { city: { enum: ["Paris", "Oslo"] } },
                required: ["city"], additionalProperties: false } } }];
const toolChat = { model, max_tokens: 60, temperature: 0, tools, tool_choice: "required",
  parallel_tool_calls: false, messages: [{ role: "user", content: "Weather in Oslo?" }] };
const called = await A.chat.completions.create(toolChat);
const call = called.choices[0].message.tool_calls?.[0];
check(called.choices[0].finish_reason === "tool_calls" && call?.function.name === "get_weather" &&
      ["Paris", "Oslo"].includes(JSON.parse(call.function.arguments).city),
      `tool_choice required -> ${call?.function.name}(${call?.function.arguments})`);
const toolStream = await B.chat.completions.create({ ...toolChat, stream: true });
let streamedCall = null, toolFinish = null;
for await (const chunk of toolStream) {
  const c = chunk.choices[0];
  if (c?.delta?.tool_calls) streamedCall = c.delta.tool_calls[0];
  if (c?.finish_reason) toolFinish = c.finish_reason;
}
check(toolFinish === "tool_calls" && streamedCall?.function?.arguments === call.function.arguments,
      `streamed tool call -> ${streamedCall?.function?.name}(${streamedCall?.function?.arguments})`);
const followUp = await B.chat.completions.create({ model, max_tokens: 8, temperature: 0, tools,
  messages: [...toolChat.messages, called.choices[0].message,
             { role: "tool", tool_call_id: call.id, content: "Snow, -3 C." }] });
check(followUp.usage.completion_tokens > 0 && followUp.usage.prompt_tokens > called.usage.prompt_tokens,
      `tool result answered: ${JSON.stringify(followUp.choices[0].message.content)}`);
const responseTools = tools.map((t) => ({ type: "function", ...t.function }));
const fnResponse = await A.responses.create({ model, input: "Weather in Oslo?", temperature: 0,
  max_output_tokens: 60, tools: responseTools, tool_choice: "required", parallel_tool_calls: false });
const fnCall = fnResponse.output.find((item) => item.type === "function_call");
check(fnCall?.name === "get_weather" && ["Paris", "Oslo"].includes(JSON.parse(fnCall.arguments).city),
      `responses function_call -> ${fnCall?.name}(${fnCall?.arguments})`);
const fnFollowUp = await B.responses.create({ model, previous_response_id: fnResponse.id,
  max_output_tokens: 8, temperature: 0, tools: responseTools,
  input: [{ type: "function_call_output", call_id: fnCall.call_id, output: "Snow, -3 C." }] });
check(fnFollowUp.previous_response_id === fnResponse.id && fnFollowUp.usage.output_tokens > 0,
      `function_call_output continues ${fnResponse.id}: ${JSON.stringify(fnFollowUp.output_text)}`);
const fnStream = await B.responses.create({ model, input: "Weather in Oslo?", temperature: 0,
  max_output_tokens: 60, tools: responseTools, tool_choice: "required", parallel_tool_calls: false,
  stream: true });
let fnArgsDone = null, fnCompleted = null;
for await (const event of fnStream) {
  if (event.type === "response.function_call_arguments.done") fnArgsDone = event.arguments;
  if (event.type === "response.completed") fnCompleted = event.response;
}
const streamedFn = fnCompleted?.output.find((item) => item.type === "function_call");
check(streamedFn?.arguments === fnCall.arguments && fnArgsDone === fnCall.arguments,
      `streamed responses function_call -> ${streamedFn?.name}(${streamedFn?.arguments})`);
// A tool with $defs (as Pydantic writes nested models) beside one with strict: false whose
// `not` the subset reads past, held together; the header names what was read past.
const defsTools = [
  { type: "function", function: { name: "book", parameters: { type: "object",
    properties: { city: { $ref: "#/$defs/City" } }, required: ["city"], additionalProperties: false,
    $defs: { City: { enum: ["Paris", "Oslo"] } } } } },
  { type: "function", function: { name: "tag_day", strict: false, parameters: { type: "object",
    properties: { tags: { type: "array", items: { type: "string", maxLength: 4, not: { const: "" } },
                          maxItems: 2, uniqueItems: true } },
    required: ["tags"], additionalProperties: false } } }];
const { data: defsCalled, response: defsResponse } =
  await A.chat.completions.create({ ...toolChat, max_tokens: 160, tools: defsTools }).withResponse();
const defsCall = defsCalled.choices[0].message.tool_calls?.[0];
const defsArgs = defsCall ? JSON.parse(defsCall.function.arguments) : {};
check(defsCalled.choices[0].finish_reason === "tool_calls" &&
      (defsCall.function.name === "book" ? ["Paris", "Oslo"].includes(defsArgs.city)
        : Array.isArray(defsArgs.tags) && defsArgs.tags.length <= 2 &&
          new Set(defsArgs.tags).size === defsArgs.tags.length) &&
      defsResponse.headers.get("x-kvfold-schema-skipped") ===
        JSON.stringify(["not at '/properties/tags/items' in tools[1].function.parameters"]),
      `$defs and strict: false tools -> ${defsCall?.function.name}(${defsCall?.function.arguments}) ` +
      `${defsCalled.choices[0].finish_reason} ${JSON.stringify(defsCalled.choices[0].message.content)}, ` +
      `skipped ${defsResponse.headers.get("x-kvfold-schema-skipped")}`);
// The deprecated functions form: the call comes back as message.function_call.
const legacy = await A.chat.completions.create({ model, max_tokens: 60, temperature: 0,
  functions: tools.map((t) => t.function), function_call: { name: "get_weather" },
  messages: [{ role: "user", content: "Weather in Oslo?" }] });
const legacyCall = legacy.choices[0].message.function_call;
check(legacy.choices[0].finish_reason === "function_call" && legacyCall?.name === "get_weather" &&
      ["Paris", "Oslo"].includes(JSON.parse(legacyCall.arguments).city),
      `functions (deprecated) -> ${legacyCall?.name}(${legacyCall?.arguments})`);
console.log("openai_smoke: all checks passed");
EOF
(cd "$WORK/node" && timeout 300 node smoke.mjs "${HTTP[A]}" "${HTTP[B]}")
