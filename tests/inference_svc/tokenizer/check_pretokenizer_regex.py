#!/usr/bin/python3
"""Cross-checks kvfold's hand-written pre-tokenizer scanners against the real regexes,
run by Python's `regex` module (Debian python3-regex: \\p{..}, (?i), look-ahead, with the
same leftmost-first backtracking semantics as Oniguruma / Rust).

usage: /usr/bin/python3 tests/inference_svc/tokenizer/check_pretokenizer_regex.py BUILD_DIR
Exit 0 when every split agrees; skips (exit 0, message) without python3-regex or
../shared.
"""
import glob
import os
import random
import subprocess
import sys

try:
    import regex
except ImportError:
    print("skip: python3-regex is not installed")
    sys.exit(0)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
SHARED = os.environ.get("KVFOLD_SHARED_DIR", os.path.join(REPO, "..", "shared"))
driver = os.path.join(sys.argv[1], "tests", "inference_svc", "tokenizer", "pretokenizer_split")

src = open(os.path.join(REPO, "inference_svc", "tokenizer", "pretokenizer.cc")).read()


def regex_source(name):
    i = src.index('R"(', src.index(name)) + 3
    return src[i:src.index(')";', i)]


patterns = {"gpt2": regex_source("kGpt2Regex[]"), "llama3": regex_source("kLlama3Regex[]"),
            "qwen2": regex_source("kQwen2Regex[]")}
texts = []
for f in ["tinystories_train_sample.txt", "kjv_genesis.txt", "tinyshakespeare.txt", "sotu.txt"]:
    path = os.path.join(SHARED, "text", f)
    if os.path.exists(path):
        texts.append((f, open(path, encoding="utf-8").read()[:300000]))
for f in sorted(glob.glob(os.path.join(SHARED, "seeds", "*.txt")))[:20]:
    texts.append((os.path.basename(f), open(f, encoding="utf-8").read()))
rng = random.Random(7)
codepoints = (list(range(0x20, 0x7F)) + [0x9, 0xA, 0xD, 0xA0, 0x2003, 0x3000, 0x85, 0x2028] +
              list(range(0xC0, 0x250)) + list(range(0x391, 0x3C9)) +
              list(range(0x410, 0x44F)) + list(range(0x4E00, 0x4E40)) +
              list(range(0x3040, 0x30FF)) + list(range(0xAC00, 0xAC20)) +
              list(range(0x660, 0x669)) + list(range(0x966, 0x96F)) +
              [0xBD, 0xB2, 0x2167, 0x1F600, 0x1F44D, 0x200D, 0x301, 0x17F, 0x2160])
pool = [chr(c) for c in codepoints]
pool += ["'s", "'S", "'re", "'RE", "'ll", "'Ll", "'d", "'t", "'m", "'ve", "'\u017fx", "  ",
         "\n\n", " \n", "\r\n", "123", "'"] * 5
for k in range(300):
    texts.append(("random%d" % k, "".join(rng.choice(pool) for _ in range(rng.randint(1, 400)))))

mismatches = 0
for key, pattern in patterns.items():
    compiled = regex.compile(pattern)
    for name, text in texts:
        want = [len(m.encode()) for m in compiled.findall(text)]
        out = subprocess.run([driver, key], input=text.encode(), capture_output=True, check=True)
        got = [int(x) for x in out.stdout.split()]
        if want != got:
            mismatches += 1
            pos, i = 0, 0
            for i, (a, b) in enumerate(zip(want, got)):
                if a != b:
                    break
                pos += a
            print("MISMATCH", key, name, "at byte", pos, repr(text.encode()[pos:pos + 40]))
print('{"texts": %d, "patterns": %d, "mismatches": %d}' % (len(texts), len(patterns), mismatches))
sys.exit(1 if mismatches else 0)
