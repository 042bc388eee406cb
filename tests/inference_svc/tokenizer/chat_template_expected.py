#!/usr/bin/env python3
"""Renders the real chat templates in testdata/chat_templates.json with Jinja2, the way
Hugging Face's apply_chat_template does (sandboxed environment, trim_blocks, lstrip_blocks,
raise_exception; continue_final_message cuts the text after the final message's stripped
content), for the fixed conversations below, and writes
testdata/chat_template_expected.json, which chat_template_test.cc compares kvfold's native
renderers against; and, for the templates with a tool format, conversations with tools,
tool calls and tool results (arguments and tools as Hugging Face's `tojson` writes them).

    /usr/bin/python3 tests/inference_svc/tokenizer/chat_template_expected.py

Needs python3-jinja2 (Debian). The test itself needs neither Python nor Jinja.
"""
import json
import os

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))

SYSTEM = {"role": "system", "content": "You are a terse assistant."}
CONVERSATIONS = {
    # name: (messages, add_generation_prompt, continue_final_message)
    "single": ([{"role": "user", "content": "Hello!"}], True, False),
    "system": ([SYSTEM, {"role": "user", "content": "  What is 2+2?  "}], True, False),
    "multi_turn": ([
        SYSTEM,
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello. How can I help?"},
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "   Blue.  "},
        {"role": "user", "content": "Another one, please\nin one word."},
    ], True, False),
    "multi_turn_no_system": ([
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello. How can I help?"},
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "   Blue.  "},
        {"role": "user", "content": "Another one, please\nin one word."},
    ], True, False),
    "assistant_prefix": ([
        {"role": "user", "content": "Count to three."},
        {"role": "assistant", "content": "One, two, "},
    ], False, True),
    "no_generation_prompt": ([
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
    ], False, False),
}


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather in a city, e.g. \"Paris\".\nUnits: \u00b0C",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "enum": ["Paris", "Oslo"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
            "ratio": {"type": "number", "default": 0.5, "exclusiveMaximum": 1e-05},
            "flags": {"type": "array", "items": {"type": "boolean"}, "default": [True, None]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"zone": {
            "type": "string", "description": "tab\there, control \u0001, slash / and \U0001f600"}}}}},
]


def call(name, arguments, call_id):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def result(content, call_id):
    return {"role": "tool", "tool_call_id": call_id, "content": content}


# Conversations with tools, rendered by the templates that have a tool format; the
# assistant's arguments are dicts, as Hugging Face templates take them.
TOOL_CONVERSATIONS = {
    # name: (messages, tools)
    "tools_single": ([{"role": "user", "content": "What is the weather in Paris?"}], TOOLS),
    "tools_system": ([SYSTEM, {"role": "user", "content": "Weather?"}], TOOLS),
    "tool_round_trip": ([
        {"role": "user", "content": "Weather and time in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            call("get_weather", {"city": "Paris", "days": 2}, "a1b2c3d4e"),
            call("get_time", {"zone": "CET"}, "f5g6h7i8j")]},
        result("18 C", "a1b2c3d4e"),
        result("12:00", "f5g6h7i8j"),
    ], TOOLS),
    "tool_call_with_content": ([
        SYSTEM,
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            call("get_weather", {"city": "Oslo", "ratio": 0.25}, "k9l8m7n6o")]},
        result("-3 C", "k9l8m7n6o"),
        {"role": "assistant", "content": "It is -3 C in Oslo."},
        {"role": "user", "content": "Thanks!"},
    ], TOOLS),
    "tool_messages_without_tools": ([
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "content": "", "tool_calls": [call("get_time", {}, "p1q2r3s4t")]},
        result("12:00", "p1q2r3s4t"),
    ], None),
    "one_call_round_trip": ([
        {"role": "user", "content": " Time in Paris? "},
        {"role": "assistant", "content": "", "tool_calls": [
            call("get_time", {"zone": "CET"}, "u5v6w7x8y")]},
        result("12:00 \"noon\"", "u5v6w7x8y"),
        {"role": "assistant", "content": "It is noon."},
        {"role": "user", "content": "And in Oslo?"},
    ], TOOLS),
    # Mistral v0.3 writes the ids (9 characters) and the result's content raw.
    "tool_result_json": ([
        SYSTEM,
        {"role": "user", "content": "Time in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [
            call("get_time", {"zone": "CET"}, "z9y8x7w6v")]},
        result("{\"time\": \"12:00\"}", "z9y8x7w6v"),
    ], TOOLS),
}
TOOL_TEMPLATES = ["qwen2_5", "llama3_1", "mistral_v3"]


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    """Hugging Face's tojson filter (Jinja's own escapes HTML and sorts keys)."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def kvfold_messages(messages):
    """The messages as kvfold's ChatMessage holds them: arguments as tojson text."""
    out = []
    for m in messages:
        k = {"role": m["role"], "content": m["content"]}
        if "tool_calls" in m:
            k["tool_calls"] = [{"name": c["function"]["name"],
                                "arguments": tojson(c["function"]["arguments"]),
                                "id": c["id"]}
                               for c in m["tool_calls"]]
        if "tool_call_id" in m:
            k["tool_call_id"] = m["tool_call_id"]
        out.append(k)
    return out


def raise_exception(message):
    raise TemplateError(message)


def render(template, bos, eos, messages, add_generation_prompt, continue_final, tools=None):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = tojson
    text = env.from_string(template).render(
        messages=messages, add_generation_prompt=add_generation_prompt,
        bos_token=bos or "", eos_token=eos or "", tools=tools)
    if continue_final:
        final = messages[-1]["content"].strip()
        text = text[: text.rindex(final) + len(final)]
    return text


def main():
    with open(os.path.join(HERE, "testdata", "chat_templates.json")) as f:
        templates = json.load(f)
    expected = {}
    for name, t in templates.items():
        cases = {}
        for conv_name, (messages, gen, cont) in CONVERSATIONS.items():
            if not t["system"] and messages[0]["role"] == "system":
                continue  # the template raises on a system message
            cases[conv_name] = render(t["template"], t["bos_token"], t["eos_token"], messages,
                                      gen, cont)
        expected[name] = cases
    # None where the template raises (Llama 3.1 takes one call per assistant message).
    tool_expected = {}
    for name in TOOL_TEMPLATES:
        t = templates[name]
        cases = tool_expected[name] = {}
        for conv, (messages, tools) in TOOL_CONVERSATIONS.items():
            try:
                cases[conv] = render(t["template"], t["bos_token"], t["eos_token"], messages,
                                     True, False, tools)
            except TemplateError:
                cases[conv] = None
    out = {"conversations": {k: {"messages": v[0], "add_generation_prompt": v[1],
                                 "continue_final_message": v[2]}
                             for k, v in CONVERSATIONS.items()},
           "expected": expected,
           "tools": [{"tool": t, "text": tojson(t)} for t in TOOLS],
           "tool_conversations": {k: {"messages": kvfold_messages(v[0]),
                                      "with_tools": v[1] is not None}
                                  for k, v in TOOL_CONVERSATIONS.items()},
           "tool_expected": tool_expected}
    with open(os.path.join(HERE, "testdata", "chat_template_expected.json"), "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
