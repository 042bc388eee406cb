#!/usr/bin/python3
"""kvfold-stage-model stages both model formats so that `--model DIR/model` loads with its
tokenizer found next to it: a Hugging Face directory (make_random_model) and a llama2.c
checkpoint + tokenizer.bin (written here, seeded), and refuses ambiguous or empty sources.

usage: stage_model_test.py STAGE_SCRIPT KVFOLD_BIN MAKE_RANDOM_MODEL_BIN
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

STAGE, KVFOLD, MAKE_MODEL = sys.argv[1:4] if len(sys.argv) >= 4 else (None, None, None)


def write_llama2c(path, dim=16, hidden=32, layers=2, heads=2, kv_heads=2, vocab=40, seq=32):
    """A llama2.c "version 0" checkpoint with shared embeddings, random (seeded) weights."""
    kv = dim * kv_heads // heads
    head = dim // heads
    floats = (vocab * dim + layers * dim + layers * dim * dim + 2 * layers * kv * dim +
              layers * dim * dim + layers * dim + 3 * layers * hidden * dim + dim + seq * head)
    rng = np.random.default_rng(7)
    with open(path, "wb") as f:
        f.write(struct.pack("7i", dim, hidden, layers, heads, kv_heads, vocab, seq))
        f.write((rng.standard_normal(floats) * 0.05).astype(np.float32).tobytes())


def write_llama2c_tokenizer(path, vocab=40):
    """llama2.c tokenizer.bin: max_token_length, then (score, length, bytes) per token."""
    letters = [bytes([c]) for c in range(ord("a"), ord("a") + vocab - 4)]
    pieces = [b"<unk>", b"<s>", b"</s>", b" "] + letters
    with open(path, "wb") as f:
        f.write(struct.pack("i", max(len(p) for p in pieces)))
        for i, p in enumerate(pieces):
            f.write(struct.pack("fi", -float(i), len(p)) + p)


def run(*args):
    env = dict(os.environ, KVFOLD_BIN=KVFOLD)  # the script's model check runs this kvfold
    return subprocess.run(list(args), capture_output=True, text=True, timeout=120, env=env)


class StageModelTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kvfold-stage-")
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def stage(self, src, extra=()):
        out = os.path.join(self.dir, "staged")
        return run(STAGE, "--from", src, "--to", out, *extra), out

    def info(self, model):
        r = run(KVFOLD, "info", "--model", model, "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def test_hugging_face_directory(self):
        src = os.path.join(self.dir, "src")
        r = run(MAKE_MODEL, "--shape", "tiny", "--out", src, "--seed", "3")
        self.assertEqual(r.returncode, 0, r.stderr)
        r, out = self.stage(src)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("hf model", r.stdout)
        self.assertEqual(self.info(os.path.join(out, "model"))["source_format"], "hf")
        self.assertEqual(self.info(os.path.join(out, "model"))["model_fingerprint"],
                         self.info(src)["model_fingerprint"])

    def test_llama2c_checkpoint_and_tokenizer(self):
        # A directory with a .bin checkpoint: `--model DIR` loads it as it is, and staging
        # keeps the same model.
        src = os.path.join(self.dir, "src")
        os.makedirs(src)
        write_llama2c(os.path.join(src, "tiny.bin"))
        write_llama2c_tokenizer(os.path.join(src, "tokenizer.bin"))
        self.assertEqual(self.info(src)["source_format"], "llama2c")
        r, out = self.stage(src)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("llama2c model", r.stdout)
        model = os.path.join(out, "model")
        self.assertEqual(self.info(model)["source_format"], "llama2c")
        self.assertEqual(self.info(model)["vocab_size"], 40)
        self.assertEqual(self.info(model)["model_fingerprint"], self.info(src)["model_fingerprint"])
        # The tokenizer is found next to the staged model.
        t = run(KVFOLD, "tokenize", "--model", model, "--text", "abc", "--json")
        self.assertEqual(t.returncode, 0, t.stderr)

    def test_projector_is_linked_from_the_source(self):
        src = os.path.join(self.dir, "src")
        os.makedirs(os.path.join(src, "projector"))
        write_llama2c(os.path.join(src, "tiny.bin"))
        write_llama2c_tokenizer(os.path.join(src, "tok40.bin"))
        with open(os.path.join(src, "projector", "projector.json"), "w") as f:
            f.write("{}")
        r, out = self.stage(src)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.isfile(os.path.join(out, "projector", "projector.json")))
        self.assertTrue(os.path.isfile(os.path.join(out, "tok40.bin")))

    def test_bad_sources_fail_with_a_reason(self):
        empty = os.path.join(self.dir, "empty")
        os.makedirs(empty)
        r, _ = self.stage(empty)
        self.assertEqual(r.returncode, 1)
        self.assertIn("neither config.json", r.stderr)
        two = os.path.join(self.dir, "two")
        os.makedirs(two)
        write_llama2c(os.path.join(two, "a.bin"))
        write_llama2c(os.path.join(two, "b.bin"))
        r, _ = self.stage(two)
        self.assertEqual(r.returncode, 1)
        self.assertIn("two checkpoints", r.stderr)
        # A checkpoint that does not load fails the init step, not the server.
        broken = os.path.join(self.dir, "broken")
        os.makedirs(broken)
        with open(os.path.join(broken, "m.bin"), "wb") as f:
            f.write(b"\0" * 64)
        write_llama2c_tokenizer(os.path.join(broken, "tokenizer.bin"))
        r, _ = self.stage(broken)
        self.assertEqual(r.returncode, 1)
        self.assertIn("does not load", r.stderr)
        self.assertEqual(run(STAGE, "--to", os.path.join(self.dir, "x")).returncode, 2)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
