"""Memory mode (issue 5 / docs/memory-mode.md) in PyTorch, plus the windowed baselines.

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
"""
import torch

from .llama import Llama


def memory_mask(num_mem, n):
    """[M + n, M + n] bool, True = may attend."""
    T = num_mem + n
    m = torch.zeros(T, T, dtype=torch.bool)
    m[:num_mem, :num_mem] = True
    m[num_mem:, :num_mem] = True
    m[num_mem:, num_mem:] = torch.ones(n, n, dtype=torch.bool).tril()
    return m


def round_memory(mem, fp16_memory=True):
    """fp16 rounding of a new memory with a straight-through gradient."""
    if not fp16_memory:
        return mem
    return mem + (mem.detach().half().float() - mem.detach())


def forward_mem_window(model: Llama, mem, tokens, collect_layers=1, logits_from=0):
    """Forward(mem, w). mem [B, M, d] or None; tokens [B, n] -> (logits [B, n - logits_from,
    V] of window rows >= logits_from, hidden [B, n, d * collect_layers] of all window rows)."""
    x = model.embed(tokens)
    M = 0 if mem is None else mem.shape[1]
    if M:
        x = torch.cat([mem, x], dim=1)
    n = tokens.shape[1]
    pos = torch.cat([torch.zeros(M, dtype=torch.int64), torch.arange(1, n + 1)])
    logits, hiddens = model.forward(x, pos, memory_mask(M, n), collect_layers=collect_layers,
                                    logits_from=M + logits_from)
    hidden = torch.cat(hiddens, dim=-1)
    return logits, hidden[:, M:]


def memory_logits(model: Llama, projector, tokens, window_size=None, chunk_size=None,
                  return_mems=False, fp16_memory=True):
    """Student logits [B, N, V] for every position of tokens [B, N], exactly as memory-mode
    decode produces them. window_size 0 = memory_only. Defaults from the projector."""
    W = projector.config["window_size"] if window_size is None else window_size
    C = projector.config["chunk_size"] if chunk_size is None else chunk_size
    L = projector.config["input_layers"]
    B, N = tokens.shape
    out = []
    mems = []
    mem = None
    k = 0
    while True:
        s = k * C
        seg = tokens[:, s:s + W + C]
        logits, hidden = forward_mem_window(model, mem, seg, L, 0 if k == 0 else W)
        out.append(logits)
        if s + W + C >= N:
            break
        mem = round_memory(projector(mem, hidden[:, :C]), fp16_memory)
        mems.append(mem)
        k += 1
    res = torch.cat(out, dim=1)
    assert res.shape[1] == N, (res.shape, N)
    return (res, mems) if return_mems else res


def sliding_logits(model: Llama, tokens, window):
    """Sliding window: each token sees the last `window` tokens including itself. Positions
    within the cache differ from text positions only by a shift, which RoPE ignores."""
    T = tokens.shape[1]
    idx = torch.arange(T)
    mask = (idx[None, :] <= idx[:, None]) & (idx[:, None] - idx[None, :] < window)
    logits, _ = model.forward(model.embed(tokens), idx, mask)
    return logits


def sink_logits(model: Llama, tokens, sink, window):
    """StreamingLLM: `sink` first tokens (cache positions 0..S-1) + the last `window`
    tokens including the current one (cache positions S..S+window-1)."""
    T = tokens.shape[1]
    idx = torch.arange(T)
    causal = idx[None, :] <= idx[:, None]
    band = causal & (idx[:, None] - idx[None, :] < window)
    full_rows = (idx < sink + window)[:, None]
    mask = torch.where(full_rows, causal, band | (idx[None, :] < sink))
    logits, _ = model.forward(model.embed(tokens), idx, mask, sink=(sink, window))
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
    mem, w, rows = None, [], []
    for t in tokens:
        w.append(int(t))
        logits, hidden = forward_mem_window(model, mem, torch.tensor([w]), L)
        rows.append(logits[0, -1])
        if len(w) == W + C:
            mem = round_memory(projector(mem, hidden[:, :C]), fp16_memory)
            w = w[C:]
    return torch.stack(rows)
