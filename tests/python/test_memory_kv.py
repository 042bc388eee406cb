"""Per-layer memory K/V (projector.json `memory_kv_layers`, docs/memory-mode.md) in the
PyTorch student:
 * zero maps (as a new projector starts) give exactly the plain projector's logits, on a
   random model and, when the shared model is present, with the committed b48 projector's
   other weights on a real story (whose trained maps do change the logits);
 * with trained (non-zero) maps the teacher-forced segment form equals the token-by-token
   decode loop (memory and memory_only, both window policies, sink tokens), and both equal
   an explicit KV-cache construction: the memory rows' K/V computed from the memory alone
   (its deep path unchanged), then layer l's memory keys and values + k_l(z), v_l(z),
   window rows attending to them with their own positions (the engine's cache layout);
 * the maps change the logits, survive a file round trip, and their K part is seen by
   the window rows only (the memory rows' hidden states are unchanged).
"""
import os
import tempfile

from _util import SOURCE_DIR, require_torch, run_main, shared_dir

require_torch()

import torch  # noqa: E402

from kvfold_torch import data, llama, memory, projector, tokenizer  # noqa: E402

CFG = llama.LlamaConfig(hidden_size=48, intermediate_size=72, num_layers=3, num_heads=6,
                        num_kv_heads=2, vocab_size=97, qkv_bias=True)
MODEL = llama.random_model(CFG, seed=3)
KV_DIM = CFG.num_kv_heads * CFG.head_dim


def make_proj(W=8, C=5, hidden=0, kv=True, trained=True, **kw):
    p = projector.MemoryProjector(
        mem_slots=3, hidden_size=48, num_heads=4, ffn_mult=2, chunk_size=C, window_size=W,
        embed_rms=0.7, seed=1, memory_kv_layers=CFG.num_layers if kv else 0,
        memory_kv_dim=KV_DIM if kv else 0, memory_kv_hidden=hidden, **kw)
    g = torch.Generator().manual_seed(9)
    with torch.no_grad():
        for name, prm in p.named_parameters():
            if trained or not name.startswith("mem_kv."):
                prm.add_(torch.randn(prm.shape, generator=g) * 0.05)
    return p


def plain_copy(p):
    """The same projector without the memory K/V maps."""
    cfg = p.config
    q = projector.MemoryProjector(
        cfg["mem_slots"], 48, cfg["num_heads"], cfg["ffn_mult"], cfg["chunk_size"],
        cfg["window_size"], embed_rms=0.7, seed=1,
        window_policy=cfg.get("window_policy", "growing"),
        sink_tokens=cfg.get("sink_tokens", 0), memory_only_window=cfg.get("memory_only_window", 0))
    q.load_state_dict({k: v for k, v in p.state_dict().items() if not k.startswith("mem_kv.")})
    return q


def cache_row_logits(model, mem, kv, w, band):
    """Logits and last-layer hidden of every window row of Forward(mem, w), built as the
    engine builds them: the memory's per-layer K/V from the memory alone (bidirectional,
    position 0), plus the maps; window keys un-rotated in the cache, rotated at attention
    time to 1 + (j - lo) for the row's visible entries lo..i (lo = i - band + 1 under the
    sliding policy), the query at 1 + (i - lo)."""
    cfg = model.cfg
    rep = cfg.num_heads // cfg.num_kv_heads
    scale = cfg.head_dim ** -0.5
    n = len(w)
    mk, mv = [], []
    if mem is not None:
        x = mem
        for i in range(cfg.num_layers):
            p = f"model.layers.{i}."
            q, k, v = model._qkv(i, llama.rms_norm(x, model.w[p + "input_layernorm.weight"],
                                                   cfg.rms_norm_eps))
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
            mk.append(k + model._heads(kv[i][0], rep))
            mv.append(v + model._heads(kv[i][1], rep))
            att = torch.softmax((q @ k.transpose(-1, -2)) * scale, -1)
            x = x + torch.nn.functional.linear(
                (att @ v).transpose(1, 2).reshape(x.shape), model.w[p + "self_attn.o_proj.weight"],
                model.w.get(p + "self_attn.o_proj.bias"))
            x = x + model._mlp(i, llama.rms_norm(
                x, model.w[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps))
    x = model.embed(torch.tensor([w]))
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        q, k, v = model._qkv(i, llama.rms_norm(x, model.w[p + "input_layernorm.weight"],
                                               cfg.rms_norm_eps))
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        rows = []
        for r in range(n):
            lo = max(0, r - band + 1) if band else 0
            cos, sin = llama.rope_cos_sin(cfg, torch.arange(1, r - lo + 2))
            qr = llama.apply_rope(q[:, :, r:r + 1], cos[-1:], sin[-1:])
            keys = [llama.apply_rope(k[:, :, lo:r + 1], cos, sin)]
            vals = [v[:, :, lo:r + 1]]
            if mk:
                keys.insert(0, mk[i])
                vals.insert(0, mv[i])
            att = torch.softmax((qr @ torch.cat(keys, 2).transpose(-1, -2)) * scale, -1)
            rows.append(att @ torch.cat(vals, 2))
        o = torch.cat(rows, 2).transpose(1, 2).reshape(x.shape)
        x = x + torch.nn.functional.linear(o, model.w[p + "self_attn.o_proj.weight"],
                                           model.w.get(p + "self_attn.o_proj.bias"))
        x = x + model._mlp(i, llama.rms_norm(
            x, model.w[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps))
    xn = llama.rms_norm(x, model.w["model.norm.weight"], cfg.rms_norm_eps)
    return torch.nn.functional.linear(xn, model.w["lm_head.weight"]), x


def test_zero_maps_are_the_plain_projector():
    g = torch.Generator().manual_seed(5)
    toks = torch.randint(3, 97, (2, 47), generator=g)
    for hidden in (0, 16):
        for kw in ({}, {"window_policy": "sliding"}, {"sink_tokens": 2}):
            p = make_proj(hidden=hidden, trained=False, **kw)
            q = plain_copy(p)
            with torch.no_grad():
                for W in (None, 0):
                    a = memory.memory_logits(MODEL, p, toks, window_size=W)
                    b = memory.memory_logits(MODEL, q, toks, window_size=W)
                    assert torch.equal(a, b), (hidden, kw, W, (a - b).abs().max().item())


def test_maps_against_decode_loop_and_kv_cache():
    g = torch.Generator().manual_seed(7)
    toks = torch.randint(3, 97, (1, 41), generator=g)
    cases = [({}, 8), ({"window_policy": "sliding"}, 7), ({}, 0), ({"sink_tokens": 2}, 8),
             ({"window_policy": "sliding", "memory_only_window": 3}, 0)]
    for hidden in (0, 16):
        for kw, W in cases:
            p = make_proj(W=W or 8, C=5, hidden=hidden, **kw)
            with torch.no_grad():
                a = memory.memory_logits(MODEL, p, toks, window_size=W)[0]
                b = memory.naive_memory_decode(MODEL, p, toks[0].tolist(), window_size=W)
                plain = memory.memory_logits(MODEL, plain_copy(p), toks, window_size=W)[0]
            err = (a - b).abs().max().item()
            assert err < 1e-5, (hidden, kw, W, err)
            assert (a - plain).abs().max().item() > 1e-3, (hidden, kw, W)
    # The explicit KV-cache construction, through 6 folds (no sinks), with fp32 memory: an
    # fp16 rounding boundary would turn a 1e-7 difference into a whole ulp of the memory.
    for kw, W in cases[:3]:
        p = make_proj(W=W or 8, C=5, hidden=16, **kw)
        band = memory.window_band(p, W)
        Weff = memory.effective_window(p, W)
        with torch.no_grad():
            got = memory.memory_logits(MODEL, p, toks, window_size=W, fp16_memory=False)[0]
            mem, w, folds = None, [], 0
            for t in range(toks.shape[1]):
                w.append(int(toks[0, t]))
                logits, hid = cache_row_logits(MODEL, mem, p.memory_kv(mem), w, band)
                err = (logits[0, -1] - got[t]).abs().max().item()
                assert err < 1e-5, (kw, W, t, err)
                if len(w) == Weff + 5:
                    mem = p(mem, hid[:, :5])
                    w = w[5:]
                    folds += 1
            assert folds >= 6, folds


def test_memory_rows_unchanged_and_file_round_trip():
    p = make_proj(hidden=16)
    mem = torch.randn(1, 3, 48)
    seg = torch.randint(3, 97, (1, 9))
    with torch.no_grad():
        _, h_kv = MODEL.forward(*_joint(mem, seg), collect_layers=3,
                                mem_kv=(0, p.memory_kv(mem)))
        _, h_plain = MODEL.forward(*_joint(mem, seg), collect_layers=3)
    for a, b in zip(h_kv, h_plain):
        assert torch.equal(a[:, :3], b[:, :3])  # the memory rows' deep path
        assert (a[:, 3:] - b[:, 3:]).abs().max().item() > 1e-4  # the window rows read the maps
    d = tempfile.mkdtemp()
    p.save(d, "cd" * 32)
    q = projector.MemoryProjector.load(d)
    assert q.config["memory_kv_layers"] == 3 and q.config["memory_kv_dim"] == KV_DIM
    assert q.config["memory_kv_hidden"] == 16
    names = set(p.contract_state())
    assert {"mem_kv.up.weight", "mem_kv.k.0.weight", "mem_kv.v.2.bias"} <= names, names
    toks = torch.randint(3, 97, (1, 30))
    with torch.no_grad():
        assert torch.equal(memory.memory_logits(MODEL, p, toks),
                           memory.memory_logits(MODEL, q, toks))
    plain = tempfile.mkdtemp()
    plain_copy(p).save(plain, "cd" * 32)
    with open(os.path.join(plain, "projector.json")) as f:
        assert "memory_kv" not in f.read()


def _joint(mem, seg):
    x = torch.cat([mem, MODEL.embed(seg)], 1)
    pos = torch.cat([torch.zeros(3, dtype=torch.int64), torch.arange(1, seg.shape[1] + 1)])
    return x, pos, memory.memory_mask(3, seg.shape[1])


def test_committed_b48_zero_maps_and_its_maps():
    """The committed b48 projector (trained maps): with its maps zeroed it gives exactly the
    plain projector of its other weights on a validation story, and its trained maps move
    the logits (skipped without the shared model)."""
    model_path = os.path.join(shared_dir(), "models", "stories260K", "stories260K.bin")
    text = os.path.join(shared_dir(), "text", "tinystories_train_sample.txt")
    if not (os.path.exists(model_path) and os.path.exists(text)):
        print("  (shared stories260K or text absent: skipped)")
        return
    model = llama.load_model(model_path)
    tok = tokenizer.Llama2cTokenizer(os.path.join(os.path.dirname(model_path), "tok512.bin"))
    trained = projector.MemoryProjector.load(os.path.join(SOURCE_DIR, "models",
                                                          "stories260K-projector-b48"))
    cfg = trained.config
    assert cfg["memory_kv_layers"] == 5 and cfg["memory_kv_dim"] == 32
    base = {k: v for k, v in trained.state_dict().items() if not k.startswith("mem_kv.")}
    geometry = dict(window_policy=cfg["window_policy"],
                    memory_only_window=cfg.get("memory_only_window", 0))
    plain = projector.MemoryProjector(cfg["mem_slots"], cfg["hidden_size"], cfg["num_heads"],
                                      cfg["ffn_mult"], cfg["chunk_size"], cfg["window_size"],
                                      **geometry)
    plain.load_state_dict(base)
    zero = projector.MemoryProjector(cfg["mem_slots"], cfg["hidden_size"], cfg["num_heads"],
                                     cfg["ffn_mult"], cfg["chunk_size"], cfg["window_size"],
                                     memory_kv_layers=5, memory_kv_dim=32,
                                     memory_kv_hidden=cfg["memory_kv_hidden"], **geometry)
    missing, unexpected = zero.load_state_dict(base, strict=False)
    assert not unexpected and missing and all(k.startswith("mem_kv.") for k in missing)
    train, _ = data.split_train_heldout(data.read_stories(text), 200)
    ids = torch.tensor([data.encode_stories(tok, train[-1:], 512)[0]])
    with torch.no_grad():
        a = memory.memory_logits(model, plain, ids)
        assert torch.equal(a, memory.memory_logits(model, zero, ids))
        assert (a - memory.memory_logits(model, trained, ids)).abs().max().item() > 0.05


if __name__ == "__main__":
    run_main([test_zero_maps_are_the_plain_projector, test_maps_against_decode_loop_and_kv_cache,
              test_memory_rows_unchanged_and_file_round_trip,
              test_committed_b48_zero_maps_and_its_maps])
