"""Memory-mode parity: C++ `kvfold logits --mode memory|memory_only --projector DIR`
(decode path, several folds) vs the PyTorch student (kvfold_torch.memory) on a random tiny
model and a random projector: max abs error < 1e-4 in fp32. Two projectors: one written by
C++ `make_random_projector` (when built) and one exported by the PyTorch side (so both the
loader and the exporter are held to CONTRACTS.md), input_layers 1 and 3.

usage: test_memory_parity.py --make-random-model BIN --kvfold BIN [--make-random-projector BIN]
"""
import argparse
import json
import os
import subprocess
import tempfile

from _util import require_binary, require_torch, run_main

require_torch()
ap = argparse.ArgumentParser()
ap.add_argument("--make-random-model", default="")
ap.add_argument("--kvfold", default="")
ap.add_argument("--make-random-projector", default="")
args = ap.parse_args()
MRM = require_binary(args.make_random_model, "make_random_model")
KVFOLD = require_binary(args.kvfold, "kvfold")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kvfold_torch import llama, memory, projector  # noqa: E402

TMP = tempfile.mkdtemp(prefix="kvfold_py_memparity_")
TOL = 1e-4
MODEL_DIR = os.path.join(TMP, "model")
subprocess.run([MRM, "--shape", "tiny", "--seed", "21", "--out", MODEL_DIR], check=True,
               capture_output=True)
MODEL = llama.load_model(MODEL_DIR)
VOCAB = MODEL.cfg.vocab_size


def fingerprint():
    r = subprocess.run([KVFOLD, "info", "--model", MODEL_DIR, "--json"], capture_output=True,
                       text=True, check=True)
    return json.loads(r.stdout)["model_fingerprint"]


def engine_logits(proj_dir, toks, mode):
    out = os.path.join(TMP, "logits.bin")
    cmd = [KVFOLD, "logits", "--model", MODEL_DIR, "--projector", proj_dir, "--mode", mode,
           "--tokens", ",".join(map(str, toks)), "--out", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)} failed: {r.stderr}"
    return np.fromfile(out, dtype="<f4").reshape(len(toks), VOCAB)


def python_projector(input_layers, seed):
    p = projector.MemoryProjector(mem_slots=5, hidden_size=MODEL.cfg.hidden_size, num_heads=4,
                                  ffn_mult=4, chunk_size=6, window_size=10,
                                  input_layers=input_layers, embed_rms=0.5, seed=seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for prm in p.parameters():
            prm.add_(torch.randn(prm.shape, generator=g) * 0.05)
    d = os.path.join(TMP, f"proj_py_{input_layers}")
    p.save(d, fingerprint())
    return d


def compare(proj_dir, label):
    p = projector.MemoryProjector.load(proj_dir)
    g = np.random.default_rng(3)
    toks = [1] + g.integers(3, VOCAB, size=70).tolist()  # several folds
    for mode, W in (("memory", None), ("memory_only", 0)):
        with torch.no_grad():
            want = memory.memory_logits(MODEL, p, torch.tensor([toks]), window_size=W)[0]
        got = engine_logits(proj_dir, toks, mode)
        err = float(np.abs(got - want.numpy()).max())
        print(f"  {label} {mode}: max abs err {err:.3g}")
        assert err < TOL, f"{label} {mode}: max abs error {err} >= {TOL}"


def test_python_exported_projector():
    compare(python_projector(1, 5), "pytorch-exported input_layers=1")
    compare(python_projector(3, 6), "pytorch-exported input_layers=3")


def test_cpp_random_projector():
    if not args.make_random_projector or not os.path.exists(args.make_random_projector):
        print("  (make_random_projector not built; skipped this case)")
        return
    d = os.path.join(TMP, "proj_cpp")
    subprocess.run([args.make_random_projector, "--model", MODEL_DIR, "--out", d,
                    "--mem-slots", "4", "--window", "12", "--chunk", "5", "--heads", "8",
                    "--seed", "2"], check=True, capture_output=True)
    compare(d, "make_random_projector")


if __name__ == "__main__":
    run_main([test_python_exported_projector, test_cpp_random_projector])
