#!/usr/bin/python3
"""Compares kvfold's reading of a quantized GGUF file with llama.cpp's own decoder.

  kvfold convert --model M.gguf --out DIR --dtype f32
  scripts/gguf_crosscheck.py --gguf-py LLAMA_CPP_CHECKOUT/gguf-py M.gguf DIR/model.safetensors

For every tensor except q/k (whose rows kvfold permutes to rotate_half order) it decodes the
GGUF tensor with gguf-py's numpy `quants.dequantize` and prints, per ggml type: how many
tensors kvfold holds bit for bit, the largest difference in units of a kvfold Q8 step of
its block (max |x| / 127 per 32 weights; at most 0.5 where kvfold quantized the decoded
values again), and the largest RMS difference relative to the tensor's RMS.
"""
import argparse
import json
import struct
import sys
import types

import numpy as np

LAYER_PARTS = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
TOP = {"token_embd.weight": "model.embed_tokens.weight", "output.weight": "lm_head.weight",
       "output_norm.weight": "model.norm.weight"}


def hf_name(name):
    if name in TOP:
        return TOP[name]
    _, layer, part, _ = name.split(".")
    return f"model.layers.{layer}.{LAYER_PARTS[part]}.weight"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf-py", required=True, help="llama.cpp's gguf-py directory")
    ap.add_argument("gguf")
    ap.add_argument("safetensors")
    args = ap.parse_args()
    # Only the reader and the decoders: the package's __init__ also imports its vocabulary
    # code, which needs sentencepiece.
    pkg = types.ModuleType("gguf")
    pkg.__path__ = [args.gguf_py + "/gguf"]
    sys.modules["gguf"] = pkg
    from gguf.gguf_reader import GGUFReader
    from gguf.quants import dequantize

    raw = open(args.safetensors, "rb").read()
    header_len = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + header_len])
    base = 8 + header_len
    stats = {}
    for t in GGUFReader(args.gguf).tensors:
        name = hf_name(t.name)
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            continue
        ref = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        begin, end = header[name]["data_offsets"]
        mine = np.frombuffer(raw[base + begin:base + end], dtype=np.float32)
        if mine.size != ref.size:
            sys.exit(f"{name}: {mine.size} values in kvfold's file, {ref.size} in the GGUF")
        blocks = ref.reshape(-1, 32)
        step = np.abs(blocks).max(axis=1, keepdims=True) / 127
        steps = float((np.abs(mine.reshape(-1, 32) - blocks) / np.where(step == 0, 1, step)).max())
        rel = float(np.sqrt(((mine - ref) ** 2).mean() / max(float((ref ** 2).mean()), 1e-30)))
        s = stats.setdefault(t.tensor_type.name, [0, 0, 0.0, 0.0])
        s[0] += 1
        s[1] += bool((mine == ref).all())
        s[2] = max(s[2], steps)
        s[3] = max(s[3], rel)
    for kind, (count, exact, steps, rel) in sorted(stats.items()):
        print(f"{kind}: {count} tensors, {exact} bit-identical, max difference {steps:.3f} "
              f"Q8 steps, max relative RMS difference {rel:.2e}")


if __name__ == "__main__":
    main()
