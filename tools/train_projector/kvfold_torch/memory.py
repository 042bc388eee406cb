"""Memory mode (docs/memory-mode.md) in PyTorch, plus the windowed baselines.

Decode semantics mirrored exactly (session state = (mem, w)):
  feed token x: w.append(x); logits(x) = Forward(mem, w)[last]
                if len(w) == W + C: H = hidden of w's oldest C tokens (from Forward(mem, w));
                                     mem = Projector(concat(mem, H)) (just H when mem empty);
                                     w = w[C:]
  Forward(mem, w): M memory vectors fed as input embeddings at position 0 (no rotation),
  attending bidirectionally to each other and nothing else; window token i at position
  i + 1 attends to all memory rows and causally to window tokens 0..i.

Like the C++ session (MemorySessionOptions::fp16_memory, on by default), every new memory
is rounded to fp16-representable values, so a memory block (fp16 payload) restores exactly;
in training the rounding is a straight-through estimator (identity gradient).

Teacher-forced form (identical values): segment k >= 0 covers window tokens
[kC, kC + W + C) with memory mem_k; it yields the logits of tokens [kC + W, kC + W + C)
(for k = 0: of all tokens [0, W + C)) and the hidden states of tokens [kC, kC + C), which
fold into mem_{k+1}. Gradients flow through the chain of folds. memory_only is W = 0.

Window policy "sliding" (projector.json `window_policy`): the same ids and folds, but a
window row sees only the last W tokens (the KV cache keeps M + W entries, not M + W + C);
the tokens between the window and the last fold are in neither until the next fold.

Sink tokens (projector.json `sink_tokens` S, default 0): the first S tokens of the session
are never folded and stay resident in front of the memory: the prefix is [S sink tokens,
M memory vectors], all at position 0; sink i attends to sinks 0..i only (causal), memory
rows to the sinks and to each other, window rows to the whole prefix. The window is the
token stream after the sinks; folds, the window policy and W, C apply to it unchanged.

Prefix gap (projector.json `prefix_gap` G, default 0): window token i sits at position
1 + G + i instead of i + 1 (the prefix stays at 0), so sinks and memory read as text from
further back.

Per-layer memory K/V (projector.json `memory_kv_layers`, absent = none): the projector's
maps of mem are added to each layer's memory-row keys and values as the window rows read
them (MemoryProjector.memory_kv; the memory rows' own pass is unchanged).

memory_only (window_size 0 below) keeps W = 0, or with projector.json `memory_only_window`
Wo > 0 it is memory mode with W = Wo under the sliding policy: the last Wo tokens stay
visible after every fold.
"""
import torch

from .llama import Llama


def window_band(projector, window_size):
    """Tokens a window row sees (0 = all of the window): W under the sliding window policy
    (the last W tokens, including the current one), else unbounded. memory_only (W = 0)
    grows, or slides over memory_only_window tokens when that is set."""
    if window_size == 0:
        return projector.config.get("memory_only_window", 0)
    if projector.config.get("window_policy", "growing") == "sliding":
        return window_size
    return 0


def effective_window(projector, window_size):
    """W of the segments: window_size, or for memory_only (0) its memory_only_window."""
    return window_size or projector.config.get("memory_only_window", 0)


def sink_count(projector):
    """S: the first S tokens of a session stay resident as sink tokens (0 = none)."""
    return projector.config.get("sink_tokens", 0)


def prefix_gap(projector):
    """G: free positions between the prefix (position 0) and the first window token."""
    return projector.config.get("prefix_gap", 0)


def memory_mask(num_mem, n, band=0, num_sink=0):
    """[S + M + n, S + M + n] bool, True = may attend. Prefix = S sinks (causal among
    themselves) then M memory rows (see the sinks and each other); window rows see the whole
    prefix and, with band > 0, window tokens i - band + 1 .. i only."""
    P = num_sink + num_mem
    T = P + n
    m = torch.zeros(T, T, dtype=torch.bool)
    m[:num_sink, :num_sink] = torch.ones(num_sink, num_sink, dtype=torch.bool).tril()
    m[num_sink:, :P] = True
    tok = torch.ones(n, n, dtype=torch.bool).tril()
    if band:
        idx = torch.arange(n)
        tok &= (idx[:, None] - idx[None, :]) < band
    m[P:, P:] = tok
    return m


def round_memory(mem, fp16_memory=True):
    """fp16 rounding of a new memory with a straight-through gradient."""
    if not fp16_memory:
        return mem
    return mem + (mem.detach().half().float() - mem.detach())


def forward_mem_window(model: Llama, mem, tokens, collect_layers=1, logits_from=0, band=0,
                       sink_ids=None, gap=0, kv=None):
    """Forward(sinks, mem, w). mem [B, M, d] or None; tokens [B, n]; sink_ids [B, S] or None
    -> (logits [B, n - logits_from, V] of window rows >= logits_from, hidden [B, n,
    d * collect_layers] of all window rows). logits_from < 0 also returns the logits of the
    last -logits_from prefix rows (the sinks, when mem is None).
    band > 0 (sliding window policy): row i sees window tokens i - band + 1 .. i, and once
    the band is full (i >= band) its query sits at position band for the prefix keys, as the
    engine's windowed positions (1 + i - lo) place it; window keys only need i - j.
    gap: window token i at position 1 + gap + i (a full band's query at band + gap).
    kv: the projector's per-layer memory K/V additions (MemoryProjector.memory_kv(mem)),
    read by the window rows only."""
    parts = []
    S = 0 if sink_ids is None else sink_ids.shape[1]
    if S:
        parts.append(model.embed(sink_ids))
    M = 0 if mem is None else mem.shape[1]
    if M:
        parts.append(mem)
    parts.append(model.embed(tokens))
    x = torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]
    n = tokens.shape[1]
    P = S + M
    pos = torch.cat([torch.zeros(P, dtype=torch.int64), torch.arange(1 + gap, n + 1 + gap)])
    sink = sink_rows = None
    if band and P and n > band:
        sink = (P, band + gap - P + 1)  # fixed query position band + gap
        sink_rows = torch.cat([torch.zeros(P, dtype=torch.bool), torch.arange(n) >= band])
    logits, hiddens = model.forward(x, pos, memory_mask(M, n, band, S), sink=sink,
                                    sink_rows=sink_rows, collect_layers=collect_layers,
                                    logits_from=P + logits_from,
                                    mem_kv=(S, kv) if kv is not None and M else None)
    hidden = torch.cat(hiddens, dim=-1)
    return logits, hidden[:, P:]


def memory_logits(model: Llama, projector, tokens, window_size=None, chunk_size=None,
                  return_mems=False, fp16_memory=True, grad_checkpoint=False):
    """Student logits [B, N, V] for every position of tokens [B, N], exactly as memory-mode
    decode produces them. window_size 0 = memory_only. Defaults from the projector.
    grad_checkpoint: keep only each segment's inputs for the backward pass and recompute
    its forward there (activation memory of one segment instead of all of them)."""
    W = projector.config["window_size"] if window_size is None else window_size
    C = projector.config["chunk_size"] if chunk_size is None else chunk_size
    L = projector.config["input_layers"]
    band = window_band(projector, W)
    W = effective_window(projector, W)
    G = prefix_gap(projector)
    S = min(sink_count(projector), tokens.shape[1])
    sinks = tokens[:, :S] if S else None
    tokens = tokens[:, S:]
    B, N = tokens.shape
    out = []
    mems = []
    mem = None
    k = 0
    while True:
        s = k * C
        seg = tokens[:, s:s + W + C]
        lf = -S if k == 0 else W
        if grad_checkpoint and torch.is_grad_enabled():
            logits, hidden = _checkpointed_segment(model, projector, mem, seg, L, lf, band,
                                                   sinks, G)
        else:
            logits, hidden = forward_mem_window(model, mem, seg, L, lf, band, sinks, G,
                                                projector.memory_kv(mem))
        out.append(logits)
        if s + W + C >= N:
            break
        mem = round_memory(projector(mem, hidden[:, :C]), fp16_memory)
        mems.append(mem)
        k += 1
    res = torch.cat(out, dim=1)
    assert res.shape[1] == S + N, (res.shape, S + N)
    return (res, mems) if return_mems else res


def _checkpointed_segment(model, projector, mem, seg, L, lf, band, sinks, gap):
    from torch.utils.checkpoint import checkpoint
    if mem is None:
        return checkpoint(lambda s: forward_mem_window(model, None, s, L, lf, band, sinks, gap),
                          seg, use_reentrant=False)
    return checkpoint(lambda m, s: forward_mem_window(model, m, s, L, lf, band, sinks, gap,
                                                      projector.memory_kv(m)),
                      mem, seg, use_reentrant=False)


def sliding_logits(model: Llama, tokens, window):
    """Sliding window: each token sees the last `window` tokens including itself. Positions
    within the cache differ from text positions only by a shift, which RoPE ignores."""
    T = tokens.shape[1]
    idx = torch.arange(T)
    mask = (idx[None, :] <= idx[:, None]) & (idx[:, None] - idx[None, :] < window)
    logits, _ = model.forward(model.embed(tokens), idx, mask)
    return logits


def sink_logits(model: Llama, tokens, sink, window, distance=0):
    """StreamingLLM: `sink` first tokens (cache positions 0..S-1) + the last `window`
    tokens including the current one (cache positions S..S+window-1). distance > 0: a
    full window's query sits at position S + distance - 1 for the sink keys (distance =
    window is StreamingLLM's layout; larger places the sinks further back)."""
    T = tokens.shape[1]
    idx = torch.arange(T)
    causal = idx[None, :] <= idx[:, None]
    band = causal & (idx[:, None] - idx[None, :] < window)
    full_rows = (idx < sink + window)[:, None]
    mask = torch.where(full_rows, causal, band | (idx[None, :] < sink))
    logits, _ = model.forward(model.embed(tokens), idx, mask, sink=(sink, distance or window),
                              sink_rows=idx >= sink + window)
    return logits


def full_logits(model: Llama, tokens):
    T = tokens.shape[1]
    logits, _ = model.forward(model.embed(tokens), torch.arange(T), model.causal_mask(T))
    return logits


def naive_memory_decode(model: Llama, projector, tokens, window_size=None, chunk_size=None,
                        fp16_memory=True):
    """Token-by-token reference of the decode loop (slow; for tests). tokens: 1-D list."""
    W = projector.config["window_size"] if window_size is None else window_size
    C = projector.config["chunk_size"] if chunk_size is None else chunk_size
    L = projector.config["input_layers"]
    band = window_band(projector, W)
    W = effective_window(projector, W)
    S = sink_count(projector)
    mem, sinks, w, rows = None, [], [], []
    for t in tokens:
        if len(sinks) < S:
            sinks.append(int(t))
        else:
            w.append(int(t))
        sink_ids = torch.tensor([sinks]) if sinks else None
        logits, hidden = forward_mem_window(model, mem, torch.tensor([w], dtype=torch.int64),
                                            L, -len(sinks) if mem is None else 0, band,
                                            sink_ids, prefix_gap(projector),
                                            projector.memory_kv(mem))
        rows.append(logits[0, -1])
        if len(w) == W + C:
            mem = round_memory(projector(mem, hidden[:, :C]), fp16_memory)
            w = w[C:]
    return torch.stack(rows)
