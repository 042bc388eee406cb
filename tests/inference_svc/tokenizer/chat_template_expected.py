#!/usr/bin/env python3
"""Renders the real chat templates in testdata/chat_templates.json with Jinja2, the way
Hugging Face's apply_chat_template does (sandboxed environment, trim_blocks, lstrip_blocks,
raise_exception; continue_final_message cuts the text after the final message's stripped
content), for the fixed conversations below, and writes
testdata/chat_template_expected.json, which chat_template_test.cc compares kvfold's native
renderers against.

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


def raise_exception(message):
    raise TemplateError(message)


def render(template, bos, eos, messages, add_generation_prompt, continue_final):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    text = env.from_string(template).render(
        messages=messages, add_generation_prompt=add_generation_prompt,
        bos_token=bos or "", eos_token=eos or "")
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
    out = {"conversations": {k: {"messages": v[0], "add_generation_prompt": v[1],
                                 "continue_final_message": v[2]}
                             for k, v in CONVERSATIONS.items()},
           "expected": expected}
    with open(os.path.join(HERE, "testdata", "chat_template_expected.json"), "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
