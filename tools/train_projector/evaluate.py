#!/usr/bin/python3
"""PyTorch-side evaluation of kvfold's KV modes (results in docs/quality.md).

Same model, same held-out text, same positions for every mode:
  full          full causal context
  sliding       the last `budget` tokens (KV entries) incl. the current one
  sink          `sink` first tokens + the last `budget - sink` tokens
  memory        M memory slots + a window of up to W + C tokens (budget M + W + C), or
                with the projector's sliding window policy the last W tokens (budget M + W)
  memory_only   M memory slots + the tokens since the last fold (W = 0; budget M + C), or
                the last memory_only_window tokens (budget M + memory_only_window)
Metrics (nats/token): NLL over all predicted positions, over positions beyond the budget
(rows t >= budget, where every bounded mode has lost context), and the recall probe: rows
t >= budget whose target is a word-initial content token (a name or noun-like piece) that
occurs earlier in the document but not in its last `budget` tokens, i.e. only outside
every mode's window (content words: word-initial alphabetic pieces of 3+ letters minus a
stop list; "any token": the same without the content filter), and the names probe of
`kvfold eval --recall` split into names whose token opens the story (is among its first
--sink tokens, which sink mode keeps) and the others. Optional long-document stability (--long FILE): NLL per 1k-token
bucket streamed through memory, sliding and sink; full mode on the first --long-full tokens.
Progress goes to stderr; a Markdown table to stdout; JSON to --json.
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from kvfold_torch import data, llama, memory, projector, tokenizer  # noqa: E402
from kvfold_torch import probe as probe_mod  # noqa: E402

STOP = {b" the", b" and", b" was", b" she", b" her", b" his", b" they", b" that", b" with",
        b" said", b" you", b" had", b" him", b" them", b" for", b" were", b" are", b" not",
        b" all", b" one", b" day", b" very", b" what", b" from", b" there", b" their",
        b" have", b" this", b" then", b" when", b" will", b" can", b" but", b" saw",
        b" did", b" went", b" The", b" She", b" They", b" His", b" Her", b" One", b" But",
        b" Then", b" When", b" And", b" time", b" upon", b" Once", b" its", b" out",
        b" too", b" big", b" get", b" got", b" how", b" who", b" like", b" want",
        b" wanted", b" loved", b" happy", b" little", b" help", b" play", b" could"}


def content_ids(tok):
    out = set()
    for i, p in enumerate(tok.pieces):
        if len(p) >= 4 and p.startswith(b" ") and p[1:].isalpha() and p not in STOP:
            out.add(i)
    return out


def mode_logits(model, proj, mode, t, a):
    if mode == "full":
        return memory.full_logits(model, t)
    if mode == "sliding":
        return memory.sliding_logits(model, t, a.budget)
    if mode.startswith("sliding@"):  # another window, scored at the same positions
        return memory.sliding_logits(model, t, int(mode[len("sliding@"):]))
    if mode == "sink":
        return memory.sink_logits(model, t, a.sink, a.budget - a.sink, a.sink_distance)
    if mode == "memory":
        return memory.memory_logits(model, proj, t)
    if mode == "memory_only":
        return memory.memory_logits(model, proj, t, window_size=0)
    raise ValueError(mode)


def eval_stories(model, proj, docs, modes, a, content, tok):
    """Per mode: NLL over all rows, rows t >= budget, the recall probes, and the names
    probe of `kvfold eval --recall` (probe.names_mask at the budget) split by where the
    name's token id occurs: among the story's first --sink tokens (what sink mode keeps
    resident: a story that opens with its character's name) or not."""
    keys = ("all", "beyond", "recall", "recall_any", "names", "names_opening", "names_other")
    res = {m: {k: [0.0, 0] for k in keys} for m in modes}
    t0 = time.time()
    for i, doc in enumerate(docs):
        t = torch.tensor([doc])
        tgt = t[0, 1:]
        N = len(doc)
        probe, probe_any = [], []
        for r in range(a.budget, N - 1):
            x = doc[r + 1]
            if x in doc[:r + 1 - a.budget] and x not in doc[r + 1 - a.budget:r + 1]:
                probe_any.append(r)
                if x in content:
                    probe.append(r)
        marks = probe_mod.names_mask(tok, doc, a.budget)
        names = [r for r in range(a.budget, N - 1) if marks[r + 1]]
        opening = [r for r in names if doc[r + 1] in doc[:a.sink]]
        rows = {"names": names, "names_opening": opening,
                "names_other": [r for r in names if r not in opening]}
        with torch.no_grad():
            for m in modes:
                nll = F.cross_entropy(mode_logits(model, proj, m, t, a)[0, :-1], tgt,
                                      reduction="none")
                res[m]["all"][0] += nll.sum().item()
                res[m]["all"][1] += N - 1
                res[m]["beyond"][0] += nll[a.budget:].sum().item()
                res[m]["beyond"][1] += max(0, N - 1 - a.budget)
                res[m]["recall"][0] += nll[probe].sum().item() if probe else 0.0
                res[m]["recall"][1] += len(probe)
                res[m]["recall_any"][0] += nll[probe_any].sum().item() if probe_any else 0.0
                res[m]["recall_any"][1] += len(probe_any)
                for k, rs in rows.items():
                    res[m][k][0] += nll[rs].sum().item() if rs else 0.0
                    res[m][k][1] += len(rs)
        if (i + 1) % 20 == 0:
            print(f"  stories {i + 1}/{len(docs)} ({time.time() - t0:.0f}s)", file=sys.stderr)
    out = {}
    for m in modes:
        out[m] = {k: {"nll": v[0] / max(1, v[1]), "tokens": v[1]} for k, v in res[m].items()}
    return out


def encode_long(tok, text):
    """llama2.c encode (BOS + dummy prefix) of a long text. No tok512 piece contains a
    newline except <s>/</s> (never formed by merges; newline is a byte-fallback piece), so
    no merge crosses a newline and encoding line by line gives the same ids, much faster."""
    ids = [1]
    lines = text.split("\n")
    for j, line in enumerate(lines):
        if j == 0:
            ids.extend(tok.encode(line, bos=False))
        else:
            ids.extend(tok.encode("\n", bos=False, dummy_prefix=False))
            ids.extend(tok.encode(line, bos=False, dummy_prefix=False))
    return ids


def windowed_chunked(model, ids, mode, budget, sink, block=1024):
    """Per-token NLL of sliding/sink over a long token list, computed exactly in chunks:
    rows [a, a + block) come with a warm-up of L * (window - 1) earlier rows (the receptive
    field of an L-layer band-limited model) plus, in sink mode, the S sink tokens."""
    L = model.cfg.num_layers
    S = sink if mode == "sink" else 0
    Wm = budget - S
    warm = L * (Wm - 1)
    out = []
    N = len(ids)
    for a in range(0, N - 1, block):
        b = min(N, a + block + 1)
        c0 = max(0, a - warm)
        if S and c0 > S:
            orig = list(range(S)) + list(range(c0, b))
        elif S:
            orig = list(range(b))
        else:
            orig = list(range(c0, b))
        o = torch.tensor(orig)
        t = torch.tensor([[ids[i] for i in orig]])
        causal = o[None, :] <= o[:, None]
        band = causal & (o[:, None] - o[None, :] < Wm)
        with torch.no_grad():
            if S:
                mask = torch.where((o < S + Wm)[:, None], causal, band | (o[None, :] < S))
                logits, _ = model.forward(model.embed(t), o, mask, sink=(S, Wm),
                                          sink_rows=o >= S + Wm)
            else:
                logits, _ = model.forward(model.embed(t), o, band)
        rows = [k for k, x in enumerate(orig) if a <= x < b - 1]
        tg = torch.tensor([ids[orig[k] + 1] for k in rows])
        out.append(F.cross_entropy(logits[0, rows], tg, reduction="none"))
    return torch.cat(out)


def long_doc(model, proj, ids, a):
    buckets = {}
    N = len(ids)
    with torch.no_grad():
        t0 = time.time()
        tg = torch.tensor(ids[1:])
        nb = (N - 1 + 999) // 1000
        for m in a.long_modes:
            if m == "full":
                n = min(N, a.long_full)
                lg = memory.full_logits(model, torch.tensor([ids[:n]]))[0, :-1]
                nll = F.cross_entropy(lg, tg[:n - 1], reduction="none")
            elif m in ("memory", "memory_only"):
                nll = _memory_stream_nll(model, proj, ids, 0 if m == "memory_only" else None)
            else:
                nll = windowed_chunked(model, ids, m, a.budget, a.sink)
            buckets[m] = [nll[i * 1000:(i + 1) * 1000].mean().item() for i in range(nb)
                          if i * 1000 < len(nll)]
            print(f"  long doc {m}: {len(nll)} tokens ({time.time() - t0:.0f}s)",
                  file=sys.stderr)
    return buckets


def _memory_stream_nll(model, proj, ids, window_size):
    if memory.sink_count(proj) or memory.prefix_gap(proj):
        raise SystemExit("--long with sink tokens or a prefix gap: use kvfold eval --buckets "
                         "(docs/eval.md)")
    W = proj.config["window_size"] if window_size is None else window_size
    C = proj.config["chunk_size"]
    L = proj.config["input_layers"]
    band = memory.window_band(proj, W)
    W = memory.effective_window(proj, W)
    toks = torch.tensor([ids])
    N = len(ids)
    out, mem, k = [], None, 0
    while True:
        s = k * C
        seg = toks[:, s:s + W + C]
        lf = 0 if k == 0 else W
        logits, hidden = memory.forward_mem_window(model, mem, seg, L, lf, band,
                                                   kv=proj.memory_kv(mem))
        tgt_lo, tgt_hi = s + lf + 1, min(N, s + W + C + 1)
        n = tgt_hi - tgt_lo
        if n > 0:
            out.append(F.cross_entropy(logits[0, :n], toks[0, tgt_lo:tgt_hi], reduction="none"))
        if s + W + C >= N:
            break
        mem = memory.round_memory(proj(mem, hidden[:, :C]))
        k += 1
        if k % 500 == 0:
            print(f"    memory stream {s}/{N}", file=sys.stderr)
    return torch.cat(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--projector", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--heldout", type=int, default=200)
    ap.add_argument("--split", choices=["heldout", "val"], default="heldout",
                    help="heldout: the last --heldout stories (the reported numbers); val: "
                         "the --val stories before them (train.py's validation split, the "
                         "only one used for choices)")
    ap.add_argument("--val", type=int, default=50)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--budget", type=int, default=0,
                    help="default: the projector's, M + W + C (growing) or M + W (sliding)")
    ap.add_argument("--sink", type=int, default=4)
    ap.add_argument("--sink-distance", type=int, default=0,
                    help="sink mode: a full window's query sits this many positions after "
                         "the first sink (0: the window, StreamingLLM's layout)")
    ap.add_argument("--modes", default="full,sliding,sink,memory,memory_only",
                    help="also sliding@N: a sliding window of N tokens scored at the same "
                         "positions (rows t >= budget), e.g. sliding@96,sliding@128")
    ap.add_argument("--long", default="", help="long document (e.g. kjv_genesis.txt)")
    ap.add_argument("--long-modes", default="memory,memory_only,sliding,sink,full")
    ap.add_argument("--long-full", type=int, default=2048)
    ap.add_argument("--long-max-tokens", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model = llama.load_model(a.model)
    tok = tokenizer.Llama2cTokenizer(a.tokenizer)
    proj = projector.MemoryProjector.load(a.projector).eval()
    cfg = proj.config
    sliding_policy = memory.window_band(proj, cfg["window_size"]) > 0
    sinks = memory.sink_count(proj)
    if not a.budget:
        a.budget = sinks + cfg["mem_slots"] + cfg["window_size"]
        if not sliding_policy:
            a.budget += cfg["chunk_size"]
    modes = a.modes.split(",")
    a.long_modes = a.long_modes.split(",")
    train, held = data.split_train_heldout(data.read_stories(a.text), a.heldout)
    if a.split == "val":
        held = train[-a.val:]
    docs = data.encode_stories(tok, held, a.max_len)
    print(f"evaluating {len(docs)} {a.split} stories, {sum(map(len, docs))} tokens",
          file=sys.stderr)
    res = eval_stories(model, proj, docs, modes, a, content_ids(tok), tok)
    budgets = {"full": "all", "sliding": str(a.budget), "sink": f"{a.sink} + {a.budget - a.sink}",
               "memory": (f"{cfg['mem_slots']} + {cfg['window_size']}" if sliding_policy else
                          f"{cfg['mem_slots']} + {cfg['window_size']} + {cfg['chunk_size']}"),
               "memory_only": (f"{cfg['mem_slots']} + {cfg['memory_only_window']} (sliding)"
                               if cfg.get("memory_only_window") else
                               f"{cfg['mem_slots']} + {cfg['chunk_size']}")}
    if sinks:
        budgets = {m: (f"{sinks} sinks + {b}" if m.startswith("memory") else b)
                   for m, b in budgets.items()}
    full_b = res["full"]["beyond"]["nll"] if "full" in res else float("nan")
    print(f"| mode | KV budget | NLL all | NLL beyond {a.budget} | vs full (beyond) | "
          f"recall probe NLL (content words) | recall probe NLL (any token) | names probe | "
          f"names: opening the story | names: other |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for m in modes:
        r = res[m]
        b = budgets.get(m, m.partition("@")[2])
        print(f"| {m} | {b} | {r['all']['nll']:.4f} | {r['beyond']['nll']:.4f} | "
              f"{100 * (r['beyond']['nll'] / full_b - 1):+.2f}% | {r['recall']['nll']:.4f} | "
              f"{r['recall_any']['nll']:.4f} | {r['names']['nll']:.4f} | "
              f"{r['names_opening']['nll']:.4f} | {r['names_other']['nll']:.4f} |")
    t = res[modes[0]]
    print(f"\ntokens: all {t['all']['tokens']}, beyond {t['beyond']['tokens']}, recall probe "
          f"{t['recall']['tokens']} (content words), {t['recall_any']['tokens']} (any token), "
          f"names {t['names']['tokens']} ({t['names_opening']['tokens']} opening the story)")
    out = {"stories": res, "budget": a.budget, "sink": a.sink, "projector": cfg,
           "split": a.split, "heldout_stories": len(docs)}
    if a.long:
        with open(a.long, encoding="utf-8") as f:
            text = f.read().strip()
        ids = encode_long(tok, text)
        if a.long_max_tokens:
            ids = ids[:a.long_max_tokens]
        print(f"long document: {len(ids)} tokens", file=sys.stderr)
        b = long_doc(model, proj, ids, a)
        out["long"] = {"tokens": len(ids), "buckets": b}
        print(f"\nLong document ({os.path.basename(a.long)}, {len(ids)} tokens), NLL per 1k-token "
              f"bucket:\n")
        lm = [m for m in a.long_modes if m in b]
        print("| bucket | " + " | ".join(lm) + " |")
        print("| --- |" + " --- |" * len(lm))
        nb = max(len(v) for v in b.values())
        for i in range(nb):
            if i < 3 or i % 10 == 0 or i == nb - 1:
                cells = [f"{b[m][i]:.3f}" if i < len(b[m]) else "-" for m in lm]
                print(f"| {i}k | " + " | ".join(cells) + " |")
        cells = [f"{sum(b[m]) / len(b[m]):.3f}" for m in lm]
        print("| mean | " + " | ".join(cells) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
