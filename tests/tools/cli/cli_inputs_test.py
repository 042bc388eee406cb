#!/usr/bin/python3
"""`kvfold` refuses malformed inputs with exit 2 and a message that names the input.

Token id lists (generate --prompt-ids, logits --tokens / --tokens-file, tokenize --ids)
share one parser: empty ids between commas or at an end, non-integers and ids past int32
are refused with their position; a bracketed list is accepted. An --out path that cannot
be written names the path and the reason. Runs on a tiny random model (make_random_model),
so it needs nothing outside the build. make_random_projector scales its projector by the
embeddings' RMS, which it reads as values whatever the weights' dtype (q8 included).

usage: cli_inputs_test.py KVFOLD MAKE_RANDOM_MODEL MAKE_RANDOM_PROJECTOR
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

KVFOLD, MAKE_MODEL, MAKE_PROJECTOR = sys.argv.pop(1), sys.argv.pop(1), sys.argv.pop(1)


def run(*args):
    return subprocess.run([KVFOLD, *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


class CliInputsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = os.path.join(cls.tmp.name, "tiny")
        subprocess.run([MAKE_MODEL, "--shape", "tiny", "--out", cls.model, "--seed", "3"],
                       check=True, capture_output=True, timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_projector_reads_q8_embeddings_as_values(self):
        q8 = os.path.join(self.tmp.name, "tiny-q8")
        r = run("convert", "--model", self.model, "--out", q8, "--dtype", "q8")
        self.assertEqual(r.returncode, 0, r.stderr)
        rms = {}
        for name, model in (("f32", self.model), ("q8", q8)):
            p = subprocess.run([MAKE_PROJECTOR, "--model", model, "--out",
                                os.path.join(self.tmp.name, "projector-" + name), "--mem-slots", "8",
                                "--window", "16", "--chunk", "8", "--heads", "4"],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            rms[name] = json.loads(p.stdout)["embed_rms"]
        # Q8 rounds each weight by at most half a step of max |x| / 127 per 32.
        self.assertGreater(rms["f32"], 0)
        self.assertAlmostEqual(rms["q8"] / rms["f32"], 1.0, delta=0.01)

    def refused(self, r, *needles):
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        for needle in needles:
            self.assertIn(needle, r.stderr)

    def test_prompt_ids(self):
        gen = ["generate", "--model", self.model, "--max-new-tokens", "2", "--prompt-ids"]
        self.refused(run(*gen, "1,,2"), "--prompt-ids: empty id at position 2")
        self.refused(run(*gen, "1,2,"), "--prompt-ids: empty id at position 3")
        self.refused(run(*gen, "1,x"), "--prompt-ids: 'x' at position 2 is not a 32-bit integer")
        self.refused(run(*gen, "4294967297"), "'4294967297' at position 1")
        self.refused(run(*gen, "[1,2"), "'[' without a closing ']'")
        for good in ("1,2,3", "[1, 2, 3]", "1 2 3"):
            r = run(*gen, good, "--json")
            self.assertEqual(r.returncode, 0, f"{good}: {r.stderr}")

    def test_logits_tokens_and_out(self):
        base = ["logits", "--model", self.model]
        out = os.path.join(self.tmp.name, "logits.bin")
        self.refused(run(*base, "--tokens", "3,,4", "--out", out), "--tokens: empty id")
        empty = os.path.join(self.tmp.name, "empty.txt")
        open(empty, "w").close()
        self.refused(run(*base, "--tokens-file", empty, "--out", out),
                     "--tokens-file: no token ids")
        missing = os.path.join(self.tmp.name, "missing.txt")
        self.refused(run(*base, "--tokens-file", missing, "--out", out),
                     f"cannot open --tokens-file {missing}: No such file or directory")
        nowhere = os.path.join(self.tmp.name, "no", "such", "dir", "logits.bin")
        self.refused(run(*base, "--tokens", "3,4", "--out", nowhere),
                     f"cannot write --out {nowhere}: No such file or directory")
        ids = os.path.join(self.tmp.name, "ids.txt")
        with open(ids, "w") as f:
            f.write("[3, 4,\n 5]\n")
        r = run(*base, "--tokens-file", ids, "--out", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertGreater(os.path.getsize(out), 0)
        self.assertEqual(os.path.getsize(out) % (3 * 4), 0)  # 3 rows of float logits

    def test_threads_must_not_be_negative(self):
        self.refused(run("generate", "--model", self.model, "--threads", "-1", "--prompt-ids", "1"),
                     "--threads: must be >= 0, got -1")


if __name__ == "__main__":
    unittest.main()
