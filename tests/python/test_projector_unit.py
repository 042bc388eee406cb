"""Python-only checks of the PyTorch student (no C++ needed):
 * projector files round-trip (contract tensor names and shapes, same outputs);
 * the teacher-forced segment form of memory mode equals the token-by-token decode loop
   over several folds (memory and memory_only, input_layers 1 and 3);
 * the sliding window policy (mem + the last W tokens) against a per-row construction of
   each row's visible tokens and positions;
 * sink tokens in memory mode: segment form = decode loop; one sink before the first fold
   = full mode;
 * with a window covering the whole sequence, memory mode equals full mode (positions
   shifted by one; RoPE is relative) and sliding/sink equal full;
 * gradient checkpointing gives the same gradients, bf16 autocast runs; the streamed
   training text resumes exactly;
 * the llama2.c loader's RoPE permutation: interleaved-pair RoPE on the raw weights equals
   the loaded model's rotate_half RoPE;
 * the names probe train.py weights and validates on (probe.names_mask) marks what
   `kvfold eval --recall` marks on a hand-checked text (docs/eval.md, "Recall probe").
"""
import os
import tempfile

from _util import require_torch, run_main

require_torch()

import torch  # noqa: E402

from kvfold_torch import llama, memory, probe, projector  # noqa: E402

CFG = llama.LlamaConfig(hidden_size=48, intermediate_size=72, num_layers=3, num_heads=6,
                        num_kv_heads=2, vocab_size=97, qkv_bias=True)
MODEL = llama.random_model(CFG, seed=3)
# One layer: a token's cached K/V depend only on the token (naive per-row references).
MODEL_1LAYER = llama.random_model(
    llama.LlamaConfig(hidden_size=48, intermediate_size=72, num_layers=1, num_heads=6,
                      num_kv_heads=2, vocab_size=97, qkv_bias=True), seed=4)


def make_proj(input_layers=1, W=8, C=5, seed=1, window_policy="growing", sink_tokens=0,
              prefix_gap=0, memory_only_window=0):
    p = projector.MemoryProjector(mem_slots=3, hidden_size=48, num_heads=4, ffn_mult=2,
                                  chunk_size=C, window_size=W, input_layers=input_layers,
                                  embed_rms=0.7, seed=seed, window_policy=window_policy,
                                  sink_tokens=sink_tokens, prefix_gap=prefix_gap,
                                  memory_only_window=memory_only_window)
    with torch.no_grad():
        for prm in p.parameters():
            prm.add_(torch.randn(prm.shape, generator=torch.Generator().manual_seed(9)) * 0.05)
    return p


def test_projector_file_roundtrip():
    p = make_proj(3)
    d = tempfile.mkdtemp()
    p.save(d, "ab" * 32)
    q = projector.MemoryProjector.load(d)
    names = set(p.contract_state())
    for n in ["queries", "in_proj.weight", "in_proj.bias", "ln_q.weight", "ln_x.bias",
              "cross.q.weight", "cross.o.bias", "ln_self.weight", "self.q.weight",
              "self.v.bias", "ln_ffn.weight", "ffn.up.weight", "ffn.down.bias",
              "ln_out.weight", "ln_out.bias"]:
        assert n in names, n
    assert p.contract_state()["ffn.up.weight"].shape == (96, 48)
    assert q.config["model_fingerprint"] == "ab" * 32
    mem = torch.randn(2, 3, 48)
    h = torch.randn(2, 5, 144)
    with torch.no_grad():
        assert torch.equal(p(mem, h), q(mem, h))
        assert torch.equal(p(None, h), q(None, h))
    assert len(projector.projector_fingerprint(d)) == 64


def test_teacher_forced_equals_decode():
    g = torch.Generator().manual_seed(5)
    toks = torch.randint(3, 97, (1, 41), generator=g)
    for L in (1, 3):
        for W in (8, 0):
            p = make_proj(L, W=W, C=5)
            with torch.no_grad():
                a = memory.memory_logits(MODEL, p, toks)[0]
                b = memory.naive_memory_decode(MODEL, p, toks[0].tolist())
            err = (a - b).abs().max().item()
            assert err < 1e-5, (L, W, err)


def test_sliding_policy_against_naive():
    """Sliding window policy vs a direct construction: row i of the window (ids w, reset by
    each fold) sees the memory at position 0 and w[max(0, i - W + 1)..i] at positions
    1..n, the query last (so at most at position W). One layer: the cached K/V depend only
    on the token, so re-running a row's visible tokens reproduces it exactly."""
    model1 = MODEL_1LAYER
    g = torch.Generator().manual_seed(8)
    toks = torch.randint(3, 97, (1, 44), generator=g)
    W, C = 7, 4
    p = make_proj(1, W=W, C=C, window_policy="sliding")
    with torch.no_grad():
        got = memory.memory_logits(model1, p, toks)[0]
        assert (got - memory.naive_memory_decode(model1, p, toks[0].tolist())).abs().max() < 1e-5

        def row(mem, w, i):
            vis = torch.tensor([w[max(0, i - W + 1):i + 1]])
            return memory.forward_mem_window(model1, mem, vis)

        mem, w, folds = None, [], 0
        for t in range(toks.shape[1]):
            if len(w) == W + C:
                hid = torch.cat([row(mem, w, i)[1][:, -1:] for i in range(C)], dim=1)
                mem = memory.round_memory(p(mem, hid))
                w = w[C:]
                folds += 1
            w.append(int(toks[0, t]))
            logits, _ = row(mem, w, len(w) - 1)
            err = (logits[0, -1] - got[t]).abs().max().item()
            assert err < 1e-5, (t, err)
        assert folds >= 5, folds


def test_sink_tokens_teacher_forced_equals_decode():
    """Memory with S sink tokens: the segment form equals the decode loop over several folds
    (growing, sliding, memory_only); with S = 1 and no fold yet, the sink is BOS at position
    0 and window token i sits at position i + 1, i.e. exactly full mode; the sinks change
    every logit after the first fold (they are attended to) and survive a file round trip."""
    g = torch.Generator().manual_seed(6)
    toks = torch.randint(3, 97, (1, 43), generator=g)
    for policy, W, S, G in (("growing", 8, 1, 0), ("sliding", 7, 3, 0), ("growing", 0, 2, 0),
                            ("sliding", 7, 2, 30)):
        p = make_proj(1, W=W, C=4, window_policy=policy, sink_tokens=S, prefix_gap=G)
        with torch.no_grad():
            a = memory.memory_logits(MODEL, p, toks)[0]
            b = memory.naive_memory_decode(MODEL, p, toks[0].tolist())
            assert a.shape[0] == toks.shape[1]
            err = (a - b).abs().max().item()
            assert err < 1e-5, (policy, W, S, err)
            q = make_proj(1, W=W, C=4, window_policy=policy)
            plain = memory.memory_logits(MODEL, q, toks)[0]
            assert (a[S + W + 4:] - plain[S + W + 4:]).abs().min(dim=-1).values.max() > 0
    p = make_proj(1, W=8, C=4, sink_tokens=1)
    with torch.no_grad():
        a = memory.memory_logits(MODEL, p, toks)[0]
        full = memory.full_logits(MODEL, toks)[0]
    assert (a[:1 + 8 + 4] - full[:1 + 8 + 4]).abs().max().item() < 1e-5
    d = tempfile.mkdtemp()
    p.save(d, "cd" * 32)
    assert projector.MemoryProjector.load(d).config["sink_tokens"] == 1
    q = make_proj(1, W=8, C=4)
    q.save(d, "cd" * 32)
    assert "sink_tokens" not in projector.MemoryProjector.load(d).config


def test_memory_only_window():
    """memory_only with memory_only_window Wo: the segment form equals the decode loop, and
    it is memory mode with W = Wo under the sliding policy (the last Wo tokens visible)."""
    g = torch.Generator().manual_seed(7)
    toks = torch.randint(3, 97, (1, 40), generator=g)
    p = make_proj(1, W=8, C=4, memory_only_window=4)
    q = make_proj(1, W=4, C=4, window_policy="sliding")
    with torch.no_grad():
        a = memory.memory_logits(MODEL, p, toks, window_size=0)[0]
        b = memory.naive_memory_decode(MODEL, p, toks[0].tolist(), window_size=0)
        c = memory.memory_logits(MODEL, q, toks)[0]
        plain = memory.memory_logits(MODEL, make_proj(1, W=8, C=4), toks, window_size=0)[0]
    assert (a - b).abs().max().item() < 1e-5
    assert (a - c).abs().max().item() < 1e-6
    assert (a[8:] - plain[8:]).abs().max().item() > 1e-3


def test_grad_checkpoint_and_bf16():
    """--grad-checkpoint recomputes segments in the backward pass: same gradients; bf16
    autocast (train.py --bf16) runs the same chain with an fp32 projector."""
    g = torch.Generator().manual_seed(11)
    toks = torch.randint(3, 97, (2, 37), generator=g)
    p = make_proj(1, W=8, C=5, window_policy="sliding")
    grads = []
    for ckpt in (False, True):
        p.zero_grad()
        memory.memory_logits(MODEL, p, toks, grad_checkpoint=ckpt).pow(2).mean().backward()
        grads.append([prm.grad.clone() for prm in p.parameters()])
    for a, b in zip(*grads):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lg, mems = memory.memory_logits(MODEL, p, toks, return_mems=True)
    assert torch.isfinite(lg.float()).all() and all(m.dtype == torch.float32 for m in mems)
    ref = memory.memory_logits(MODEL, p, toks)
    assert (lg.float() - ref).abs().max() < 0.5  # bf16 is coarse, not wrong


def test_stream_batches_resume():
    """train.py --stream: documents are read lazily, drawn through a seeded shuffle buffer,
    and a resumed stream (skip(draws)) continues with exactly the same batches."""
    from kvfold_torch import data
    d = tempfile.mkdtemp()
    paths = [os.path.join(d, "a.txt"), os.path.join(d, "b.txt")]
    with open(paths[0], "w") as f:
        f.write("<|endoftext|>".join(f"story {i} " + "x" * (i % 7) for i in range(30)))
    with open(paths[1], "w") as f:
        f.write("y" * 50)  # no marker: cut into max_chars pieces
    docs = list(data.iter_documents(paths, max_chars=20))
    assert docs[0] == "story 0" and docs[-1] == "y" * 10 and len(docs) == 33

    def encode(t):
        return [1] + [ord(c) % 97 for c in t]

    a = data.StreamBatches(paths, encode, 3, 12, 9, seed=5, buffer=8, skip_docs=2)
    first = [a.next_batch() for _ in range(4)]
    b = data.StreamBatches(paths, encode, 3, 12, 9, seed=5, buffer=8, skip_docs=2)
    b.next_batch()
    b.next_batch()
    c = data.StreamBatches(paths, encode, 3, 12, 9, seed=5, buffer=8, skip_docs=2)
    c.skip(b.draws)
    assert [c.next_batch(), c.next_batch()] == first[2:]
    assert all(len(x) >= 9 and len(x) <= 12 for batch in first for x in batch)


def test_no_fold_equals_full():
    g = torch.Generator().manual_seed(6)
    toks = torch.randint(3, 97, (2, 30), generator=g)
    p = make_proj(1, W=40, C=5)
    with torch.no_grad():
        full = memory.full_logits(MODEL, toks)
        for name, got in [("memory", memory.memory_logits(MODEL, p, toks)),
                          ("sliding", memory.sliding_logits(MODEL, toks, 30)),
                          ("sink", memory.sink_logits(MODEL, toks, 4, 26))]:
            err = (got - full).abs().max().item()
            assert err < 1e-5, (name, err)


def test_sink_against_naive():
    """Sink mode vs a direct per-token construction of the cache and its positions. With
    one layer the cached K/V depend only on the token, so re-running the kept tokens
    reproduces the cache exactly."""
    model1 = MODEL_1LAYER
    g = torch.Generator().manual_seed(7)
    toks = torch.randint(3, 97, (1, 23), generator=g)
    S, Wm = 3, 6
    with torch.no_grad():
        got = memory.sink_logits(model1, toks, S, Wm)[0]
        for t in range(toks.shape[1]):
            if t < S + Wm:
                keep = list(range(t + 1))
            else:
                keep = list(range(S)) + list(range(t - Wm + 1, t + 1))
            x = model1.embed(toks[:, keep])
            n = len(keep)
            ref, _ = model1.forward(x, torch.arange(n), torch.ones(n, n, dtype=torch.bool).tril())
            err = (ref[0, -1] - got[t]).abs().max().item()
            assert err < 1e-5, (t, err)


def test_long_document_chunking_is_exact():
    """evaluate.windowed_chunked (chunks + receptive-field warm-up) equals the one-shot
    sliding and sink computations."""
    import evaluate
    g = torch.Generator().manual_seed(8)
    ids = torch.randint(3, 97, (1, 300), generator=g)
    with torch.no_grad():
        tg = ids[0, 1:]
        for mode, S in (("sliding", 0), ("sink", 3)):
            if S:
                ref = memory.sink_logits(MODEL, ids, S, 12 - S)[0, :-1]
            else:
                ref = memory.sliding_logits(MODEL, ids, 12)[0, :-1]
            ref_nll = torch.nn.functional.cross_entropy(ref, tg, reduction="none")
            got = evaluate.windowed_chunked(MODEL, ids[0].tolist(), mode, 12, S, block=50)
            err = (got - ref_nll).abs().max().item()
            assert got.shape == ref_nll.shape and err < 1e-4, (mode, err)


def test_hf_dir_and_ref_logits_cli():
    """A random model written as an HF directory (config.json + F32 safetensors) loads back
    identically, and ref_logits.py writes float32 [n, vocab] full-causal logits."""
    import json
    import subprocess
    import sys
    import numpy as np
    from kvfold_torch import safetensors_io
    from _util import SOURCE_DIR
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 48,
                   "intermediate_size": 72, "num_hidden_layers": 3, "num_attention_heads": 6,
                   "num_key_value_heads": 2, "vocab_size": 97, "rms_norm_eps": 1e-5,
                   "rope_theta": 10000.0, "tie_word_embeddings": False}, f)
    safetensors_io.save(os.path.join(d, "model.safetensors"), MODEL.w)
    loaded = llama.load_model(d)
    toks = [1, 5, 9, 33, 2, 96, 40]
    out = os.path.join(d, "logits.bin")
    subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "tools", "train_projector",
                                                 "ref_logits.py"), "--model", d, "--tokens",
                    ",".join(map(str, toks)), "--out", out], check=True)
    got = np.fromfile(out, dtype="<f4").reshape(len(toks), 97)
    with torch.no_grad():
        want = MODEL.full_logits(toks)[0].numpy()
        assert torch.equal(loaded.full_logits(toks), MODEL.full_logits(toks))
    assert np.abs(got - want).max() == 0.0


def test_llama2c_rope_permutation():
    hd = 8
    w = torch.randn(2 * hd, 16)
    perm = llama._permute_rope(w, 2, 2 * hd, 16)
    x = torch.randn(16)
    pos = 5
    inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
    q = (w @ x).view(2, hd // 2, 2)  # interleaved pairs
    c, s = torch.cos(pos * inv), torch.sin(pos * inv)
    rot = torch.stack([q[..., 0] * c - q[..., 1] * s, q[..., 0] * s + q[..., 1] * c], -1)
    cfg = llama.LlamaConfig(hidden_size=16, intermediate_size=8, num_layers=1, num_heads=2,
                            num_kv_heads=2, vocab_size=4)
    cos, sin = llama.rope_cos_sin(cfg, torch.tensor([pos]))
    qp = (perm @ x).view(1, 2, 1, hd).transpose(0, 1)
    hf = llama.apply_rope(qp, cos, sin).reshape(2, hd)
    # rotate_half layout: first half = even pair members, second half = odd ones.
    ref = torch.cat([rot[..., 0], rot[..., 1]], -1)
    assert (hf - ref).abs().max().item() < 1e-5


class CharTokenizer:
    """ids 0..2 special, then one id per character (a stand-in for a llama2.c tokenizer)."""

    def __init__(self, text):
        self.pieces = [b"<unk>", b"<s>", b"</s>"] + sorted({c.encode() for c in text})

    def encode(self, text):
        return [1] + [self.pieces.index(c.encode()) for c in text]

    def decode_piece(self, prev, t):
        return self.pieces[t]


def test_names_probe():
    """Names (capitalised, 2+ letters, at least once not at a sentence start) repeated only
    outside the window are marked, every token of the occurrence; a sentence-start capital
    that never occurs mid-sentence, a repeat inside the window and a lower-case noun are
    not; the window bounds the distance to the LAST earlier occurrence."""
    filler = " then and so it is on" * 3  # 63 characters = tokens
    text = ("Tom saw Zed and the kettle. Big fish. Tom" + filler + " Zed and Big and kettle."
            + " Zed.")
    tok = CharTokenizer(text)
    ids = tok.encode(text)
    marks = probe.names_mask(tok, ids, 40)
    s = text.encode()

    def tokens_of(word, k):
        pos = -1
        for _ in range(k + 1):
            pos = s.index(word.encode(), pos + 1)
        return list(range(pos + 1, pos + 1 + len(word)))  # + 1: the BOS

    marked = [j for j, m in enumerate(marks) if m]
    # "Zed" #2 (90 tokens after #1), not "Zed" #3 (#2 is 25 tokens back); "Tom" always
    # starts a sentence, so it is no name; "Big" starts one the first time but not the
    # second, so it is a name, and #2 is far from #1.
    assert marked == sorted(tokens_of("Zed", 1) + tokens_of("Big", 1)), marked
    assert probe.names_mask(tok, ids, 200) == [0] * len(ids)
    assert [j for j, m in enumerate(probe.names_mask(tok, ids, 0)) if m] == sorted(
        tokens_of("Zed", 1) + tokens_of("Big", 1) + tokens_of("Zed", 2))


if __name__ == "__main__":
    run_main([test_projector_file_roundtrip, test_teacher_forced_equals_decode,
              test_sliding_policy_against_naive, test_sink_tokens_teacher_forced_equals_decode,
              test_memory_only_window,
              test_grad_checkpoint_and_bf16,
              test_stream_batches_resume, test_no_fold_equals_full, test_sink_against_naive,
              test_long_document_chunking_is_exact, test_hf_dir_and_ref_logits_cli,
              test_llama2c_rope_permutation, test_names_probe])
