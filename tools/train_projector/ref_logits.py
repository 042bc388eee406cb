#!/usr/bin/python3
"""Full-causal reference logits from the independent PyTorch Llama.

usage: ref_logits.py --model PATH --tokens 1,2,3 [--tokens-file F] --out FILE
Writes raw little-endian float32 [num_tokens, vocab_size]; row i = logits after
tokens[0..i] (the same layout as `kvfold logits`).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kvfold_torch import llama  # noqa: E402


def parse_tokens(args):
    if args.tokens_file:
        with open(args.tokens_file) as f:
            text = f.read()
    else:
        text = args.tokens
    return [int(t) for t in text.replace("\n", ",").split(",") if t.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", default="")
    ap.add_argument("--tokens-file", default="")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    toks = parse_tokens(args)
    if not toks:
        print("no tokens", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    model = llama.load_model(args.model)
    with torch.no_grad():
        logits = model.full_logits(toks)[0]
    logits.numpy().astype("<f4").tofile(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
