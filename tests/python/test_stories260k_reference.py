"""The independent PyTorch Llama on the real stories260K checkpoint:
 * greedy decoding from BOS for 200 tokens reproduces greedy_from_bos_200.txt
   (produced by llama.cpp and llama2.c);
 * mean NLL over the first 100 stories of tinystories_train_sample.txt under the NLL protocol of
   docs/engine.md is 1.408 +- 0.002 over 37,072 predicted tokens.
"""
from _util import require_shared, require_torch, run_main

require_torch()
MODEL = require_shared("models", "stories260K", "stories260K.bin")
TOK = require_shared("models", "stories260K", "tok512.bin")
GREEDY = require_shared("models", "stories260K", "greedy_from_bos_200.txt")
TEXT = require_shared("text", "tinystories_train_sample.txt")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from kvfold_torch import data, llama, tokenizer  # noqa: E402

model = llama.load_model(MODEL)
tok = tokenizer.Llama2cTokenizer(TOK)


def test_greedy_from_bos_200():
    ids = [1]
    with torch.no_grad():
        for _ in range(200):
            ids.append(int(model.full_logits(ids)[0, -1].argmax()))
    text = tok.decode(ids[1:])
    with open(GREEDY, encoding="utf-8") as f:
        ref = f.read()
    assert text.strip() == ref.strip(), f"greedy text differs:\n{text!r}\nvs\n{ref!r}"


def test_tokenizer_roundtrip():
    s = "Once upon a time, Lily saw a café. 日本"
    ids = tok.encode(s)
    assert ids[0] == 1
    assert tok.decode(ids[1:]) == s, tok.decode(ids[1:])


def test_long_text_line_encoding():
    """evaluate.encode_long (line by line) equals llama2.c encode of the whole text."""
    import evaluate
    path = require_shared("text", "kjv_genesis.txt")
    with open(path, encoding="utf-8") as f:
        text = f.read()[:3000].strip()
    assert evaluate.encode_long(tok, text) == tok.encode(text)


def test_nll_first_100_stories():
    stories = data.read_stories(TEXT)[:100]
    total, n = 0.0, 0
    with torch.no_grad():
        for ids in data.encode_stories(tok, stories, 512):
            lg = model.full_logits(ids)[0]
            t = torch.tensor(ids)
            total += F.cross_entropy(lg[:-1], t[1:], reduction="sum").item()
            n += len(ids) - 1
    nll = total / n
    print(f"mean NLL {nll:.5f} over {n} tokens")
    assert n == 37072, n
    assert abs(nll - 1.408) <= 0.002, nll


if __name__ == "__main__":
    run_main([test_tokenizer_roundtrip, test_long_text_line_encoding, test_greedy_from_bos_200,
              test_nll_first_100_stories])
