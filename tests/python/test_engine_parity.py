"""Logit parity: C++ `kvfold logits` (decode path and --prefill) vs the independent
PyTorch Llama (tools/train_projector/kvfold_torch/llama.py) on random models written by the
C++ `make_random_model`: GQA, MHA, odd shapes, Qwen2 q/k/v biases, llama3/linear rope
scaling, tied and untied embeddings. Max abs error < 1e-4 in fp32. Windowed modes
(sliding, sink) are checked against the PyTorch window masks too.

usage: test_engine_parity.py --make-random-model BIN --kvfold BIN
"""
import argparse
import os
import subprocess
import sys
import tempfile

from _util import require_binary, require_torch, run_main

require_torch()
ap = argparse.ArgumentParser()
ap.add_argument("--make-random-model", default="")
ap.add_argument("--kvfold", default="")
args = ap.parse_args()
MRM = require_binary(args.make_random_model, "make_random_model")
KVFOLD = require_binary(args.kvfold, "kvfold")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kvfold_torch import llama, memory  # noqa: E402

TMP = tempfile.mkdtemp(prefix="kvfold_py_parity_")
TOL = 1e-4

# (name, make_random_model args)
CASES = [
    ("tiny_gqa_tied", ["--shape", "tiny", "--seed", "1", "--tie-embeddings"]),
    ("tiny_gqa_untied", ["--shape", "tiny", "--seed", "2", "--no-tie-embeddings"]),
    ("tiny_qwen2_bias", ["--shape", "tiny-qwen2", "--seed", "3", "--qkv-bias"]),
    ("tiny_llama3_rope", ["--shape", "tiny", "--seed", "4", "--rope-scaling", "llama3"]),
    ("tiny_linear_rope", ["--shape", "tiny", "--seed", "5", "--rope-scaling", "linear"]),
    ("tiny_mha", ["--shape", "tiny-mha", "--seed", "6"]),
    ("tiny_odd", ["--shape", "tiny-odd", "--seed", "7"]),
]


def make_model(name, extra):
    out = os.path.join(TMP, name)
    if not os.path.exists(os.path.join(out, "config.json")):
        subprocess.run([MRM, "--out", out] + extra, check=True, capture_output=True)
    return out


def engine_logits(model_dir, toks, vocab, extra=()):
    out = os.path.join(TMP, "logits.bin")
    cmd = [KVFOLD, "logits", "--model", model_dir, "--tokens", ",".join(map(str, toks)),
           "--out", out] + list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)} failed: {r.stderr}"
    return np.fromfile(out, dtype="<f4").reshape(len(toks), vocab)


def random_tokens(vocab, n, seed):
    g = np.random.default_rng(seed)
    return [1] + g.integers(3, vocab, size=n - 1).tolist()


def check(name, got, want):
    err = float(np.abs(got - want).max())
    print(f"  {name}: max abs err {err:.3g}")
    assert err < TOL, f"{name}: max abs error {err} >= {TOL}"


def test_full_mode_parity():
    for name, extra in CASES:
        d = make_model(name, extra)
        model = llama.load_model(d)
        v = model.cfg.vocab_size
        toks = random_tokens(v, 37, hash(name) % 1000)
        with torch.no_grad():
            want = model.full_logits(toks)[0].numpy()
        check(name + " decode", engine_logits(d, toks, v), want)
        check(name + " prefill", engine_logits(d, toks, v, ["--prefill"]), want)


def test_windowed_modes_parity():
    d = make_model("tiny_gqa_tied", CASES[0][1])
    model = llama.load_model(d)
    v = model.cfg.vocab_size
    toks = random_tokens(v, 53, 11)
    with torch.no_grad():
        want = memory.sliding_logits(model, torch.tensor([toks]), 16)[0].numpy()
        check("sliding 16", engine_logits(d, toks, v, ["--mode", "sliding", "--window", "16"]),
              want)
        want = memory.sink_logits(model, torch.tensor([toks]), 4, 12)[0].numpy()
        check("sink 4 + 12", engine_logits(d, toks, v, ["--mode", "sink", "--sink", "4",
                                                         "--window", "12"]), want)


if __name__ == "__main__":
    run_main([test_full_mode_parity, test_windowed_modes_parity])
