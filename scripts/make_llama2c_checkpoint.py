#!/usr/bin/env python3
"""Writes a random llama2.c "version 0" checkpoint of a real model's shape.

Both kvfold (LoadModel) and llama.cpp (llama-convert-llama2c-to-ggml) read this format,
so the same weights run in both for speed comparisons. Weights N(0, 0.02), norms 1,
tied classifier. The model emits noise but costs what a trained model of the shape costs.

  make_llama2c_checkpoint.py --shape stories110m --out FILE [--seq-len 2048] [--seed 0]
"""
import argparse
import struct

import numpy as np

# dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size
SHAPES = {
    "stories110m": (768, 2048, 12, 12, 12, 32000),
    "stories42m": (512, 1376, 8, 8, 8, 32000),
    "stories15m": (288, 768, 6, 6, 6, 32000),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), default="stories110m")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    dim, hidden, layers, heads, kv_heads, vocab = SHAPES[args.shape]
    head_dim = dim // heads
    rng = np.random.default_rng(args.seed)

    with open(args.out, "wb") as f:
        f.write(struct.pack("7i", dim, hidden, layers, heads, kv_heads, vocab, args.seq_len))

        def matrices(count, rows, cols):
            for _ in range(count):  # one matrix at a time keeps memory low
                f.write((rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).tobytes())

        def ones(*shape):
            f.write(np.ones(shape, np.float32).tobytes())

        matrices(1, vocab, dim)                      # token embedding (= classifier)
        ones(layers, dim)                            # rms_att
        matrices(layers, dim, dim)                   # wq
        matrices(layers, kv_heads * head_dim, dim)   # wk
        matrices(layers, kv_heads * head_dim, dim)   # wv
        matrices(layers, dim, dim)                   # wo
        ones(layers, dim)                            # rms_ffn
        matrices(layers, hidden, dim)                # w1
        matrices(layers, dim, hidden)                # w2
        matrices(layers, hidden, dim)                # w3
        ones(dim)                                    # rms_final
        f.write(np.zeros((2, args.seq_len, head_dim // 2), np.float32).tobytes())  # freq_cis
    print(f"wrote {args.out} ({args.shape}, seq_len {args.seq_len})")


if __name__ == "__main__":
    main()
