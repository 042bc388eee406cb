#!/usr/bin/python3
"""Train a kvfold MemoryProjector by distillation (docs/training.md).

The base model is frozen; only the projector trains. Per batch of documents:
  teacher = the base model with full causal context;
  student = memory mode in teacher-forced segments (kvfold_torch.memory.memory_logits),
            gradients flowing through the whole chain of folds;
  loss    = 0.6 * NLL(student) + 0.4 * T^2 * KL(teacher_T || student_T), T = 2,
            over the positions whose context reaches past the window (rows t >= W + C),
            each weighted 1, or 1 + --recall-weight when its target token occurs earlier in
            the document ONLY outside the student's current window (the leakage control:
            those targets can only be predicted from memory).
Held-out: the LAST --heldout stories of the text are never read for training or tuning;
the --val stories before them are a small validation split for monitoring.
Deterministic: batch order is a seeded permutation per epoch, derived from the step, so a
resumed run (--resume) replays exactly the batches an uninterrupted one would.
"""
import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from kvfold_torch import data, llama, memory, probe, projector, tokenizer  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="HF dir or llama2.c .bin")
    ap.add_argument("--tokenizer", required=True,
                    help="llama2.c tokenizer.bin (in-process), or any tokenizer `kvfold "
                    "tokenize` reads (tokenizer.json, .model, or the model dir)")
    ap.add_argument("--text", required=True,
                    help="stories separated by <|endoftext|>; with --stream a comma-separated "
                    "list of text files")
    ap.add_argument("--stream", action="store_true",
                    help="stream --text (any size): its first --val documents are the "
                    "validation split, the rest is read lazily through a shuffle buffer; "
                    "--heldout does not apply (hold out a separate file)")
    ap.add_argument("--shuffle-buffer", type=int, default=4096)
    ap.add_argument("--init-from", default="",
                    help="projector dir whose weights start this run (its first M queries "
                    "when it has more); a warm start for a new budget or window policy")
    ap.add_argument("--token-cache", default="",
                    help="JSON file caching the encoded training stories across runs")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    ap.add_argument("--bf16", action="store_true",
                    help="frozen model weights in bf16 and bf16 autocast for the forward "
                    "passes (the projector and its optimizer stay fp32)")
    ap.add_argument("--grad-checkpoint", action="store_true",
                    help="recompute each segment's forward in the backward pass")
    ap.add_argument("--out", required=True, help="output dir (projector + logs + ckpt)")
    ap.add_argument("--heldout", type=int, default=200)
    ap.add_argument("--val", type=int, default=50)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--mem-slots", type=int, default=16)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=32)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--ffn-mult", type=int, default=4)
    ap.add_argument("--input-layers", type=int, default=1, choices=[1, 3])
    ap.add_argument("--window-policy", default="growing", choices=["growing", "sliding"],
                    help="growing: the window holds W..W + C tokens (budget M + W + C); "
                    "sliding: always the last W tokens (budget M + W)")
    ap.add_argument("--sink-tokens", type=int, default=0,
                    help="S: the first S tokens of a session stay resident (never folded)")
    ap.add_argument("--prefix-gap", type=int, default=0,
                    help="G: window token i at position 1 + G + i (the prefix stays at 0)")
    ap.add_argument("--memory-only-window", type=int, default=0,
                    help="memory_only keeps its last N <= C tokens visible (0: none)")
    ap.add_argument("--memory-kv", action="store_true",
                    help="per-layer memory K/V: learned maps of the memory vectors added to "
                    "each layer's memory-row keys and values (zero at the start)")
    ap.add_argument("--memory-kv-hidden", type=int, default=0,
                    help="with --memory-kv: 0 = linear maps, H = one shared GELU layer of H")
    ap.add_argument("--memory-kv-lr", type=float, default=0,
                    help="peak lr of the per-layer memory K/V maps (0: --lr)")
    ap.add_argument("--freeze-projector", action="store_true",
                    help="with --memory-kv: train only the new maps")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="end after the step that crosses this much training time (the lr "
                    "schedule still spans --steps); 0: no limit")
    ap.add_argument("--stop-at", type=int, default=0,
                    help="end after this step (the lr schedule still spans --steps); the "
                    "written projector is that step's")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--temperature", type=float, default=2.0)
    ap.add_argument("--nll-weight", type=float, default=0.6)
    ap.add_argument("--kl-weight", type=float, default=0.4)
    ap.add_argument("--recall-weight", type=float, default=2.0)
    ap.add_argument("--name-weight", type=float, default=0.0,
                    help="rows whose target is a token of a name last seen only outside "
                    "the student's window (the names probe of docs/eval.md) get weight "
                    "1 + this (combined with --recall-weight)")
    ap.add_argument("--memory-only-frac", type=float, default=0.0,
                    help="fraction of batches trained with W = 0 (memory_only)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--val-every", type=int, default=100,
                    help="0: no validation pass; each pass also writes that step's "
                    "projector to OUT/val/step_N so a step can be chosen on it")
    ap.add_argument("--val-max-len", type=int, default=0,
                    help="validation stories truncated to this many tokens (0: --max-len)")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--model-fingerprint", default="")
    ap.add_argument("--kvfold", default="", help="kvfold binary for `info --json`")
    return ap.parse_args(argv)


def model_fingerprint(args):
    if args.model_fingerprint:
        return args.model_fingerprint
    c = find_kvfold(args)
    if c:
        r = subprocess.run([c, "info", "--model", args.model, "--json"],
                           capture_output=True, text=True)
        if r.returncode == 0:
            return json.loads(r.stdout)["model_fingerprint"]
    print("warning: no model fingerprint (give --model-fingerprint or --kvfold)",
          file=sys.stderr)
    return ""


def recall_mask(tokens, W, C, band=0):
    """[B, N] bool over ROWS t (predicting tokens[t + 1]): the target occurs in
    tokens[0 : start of the student's window at row t] and not inside that window
    (band > 0: the window is the last `band` tokens)."""
    B, N = tokens.shape
    out = np.zeros((B, N), dtype=bool)
    tk = tokens.numpy()
    for b in range(B):
        row = tk[b]
        for t in range(W + C, N - 1):
            k = (t - W) // C
            s = max(k * C, t - band + 1) if band else k * C
            tgt = row[t + 1]
            if tgt in row[s:t + 1]:
                continue
            if tgt in row[:s]:
                out[b, t] = True
    return torch.from_numpy(out)


class KvfoldTokenizer:
    """Encodes through `kvfold tokenize` (HF tokenizer.json, SentencePiece, llama2.c), for
    models whose tokenizer the Python package does not read. One process per document."""

    def __init__(self, kvfold, path):
        self.kvfold, self.path = kvfold, path

    def encode(self, text):
        import tempfile
        with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            r = subprocess.run([self.kvfold, "tokenize", "--tokenizer", self.path, "--file",
                                f.name], capture_output=True, text=True, check=True)
        return [int(x) for x in r.stdout.strip().split(",") if x]


def find_kvfold(args):
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    cands = [args.kvfold] if args.kvfold else []
    cands += [os.path.join(root, b, "tools", "kvfold", "kvfold")
              for b in sorted(os.listdir(root)) if b.startswith("build")]
    return next((c for c in cands if c and os.path.exists(c)), "")


def load_tokenizer(args):
    if args.tokenizer.endswith(".bin"):
        return tokenizer.Llama2cTokenizer(args.tokenizer)
    kv = find_kvfold(args)
    if not kv:
        raise SystemExit("--tokenizer is not a llama2.c .bin and no kvfold binary was found "
                         "(give --kvfold)")
    return KvfoldTokenizer(kv, args.tokenizer)


def batch_tokens(docs, idx, pad=0):
    n = max(len(docs[i]) for i in idx)
    t = torch.full((len(idx), n), pad, dtype=torch.int64)
    valid = torch.zeros((len(idx), n), dtype=torch.bool)
    for j, i in enumerate(idx):
        t[j, :len(docs[i])] = torch.tensor(docs[i])
        valid[j, :len(docs[i])] = True
    return t, valid


def distill_loss(student, teacher, tokens, weights, T, a_nll, a_kl):
    """Weighted mean over rows with weight > 0 (rows predict tokens[t + 1])."""
    s = student[:, :-1]
    te = None if teacher is None else teacher[:, :-1]
    tgt = tokens[:, 1:]
    w = weights[:, :-1]
    nll = F.cross_entropy(s.reshape(-1, s.shape[-1]), tgt.reshape(-1),
                          reduction="none").view_as(tgt)
    if teacher is None:  # a_kl == 0
        kl = torch.zeros_like(nll)
    else:
        lt = F.log_softmax(te / T, dim=-1)
        ls = F.log_softmax(s / T, dim=-1)
        kl = (lt.exp() * (lt - ls)).sum(-1)
    denom = w.sum().clamp_min(1.0)
    nll_m = (nll * w).sum() / denom
    kl_m = (kl * w).sum() / denom
    loss = a_nll * nll_m + a_kl * T * T * kl_m
    return loss, nll_m.detach(), kl_m.detach()


def name_rows(tok, tokens, valid, window):
    """[B, N] float: row t predicts a names-probe token (probe.names_mask at `window`)."""
    out = torch.zeros(tokens.shape)
    for b in range(tokens.shape[0]):
        ids = tokens[b][valid[b]].tolist()
        m = probe.names_mask(tok, ids, window)
        out[b, :len(ids) - 1] = torch.tensor(m[1:], dtype=torch.float32)
    return out


def row_weights(tokens, valid, W, C, recall_w, band=0, sinks=0, names=None, name_w=0.0):
    """Rows whose context reaches past the first fold (t >= S + W + C) count; `names`
    ([B, N] 0/1 from name_rows) adds name_w to those rows' weight."""
    B, N = tokens.shape
    rows = torch.arange(N)[None, :].expand(B, N)
    nxt_valid = torch.zeros_like(valid)
    nxt_valid[:, :-1] = valid[:, 1:]
    w = ((rows >= sinks + W + C) & nxt_valid).float()
    if recall_w:
        w = w * (1 + recall_w * recall_mask(tokens, W, C, band).float())
    if names is not None and name_w:
        w = w * (1 + name_w * names)
    return w


def autocast(args):
    """bf16 autocast on --device with --bf16, else a no-op context."""
    kind = "cuda" if args.device.startswith("cuda") else "cpu"
    return torch.autocast(kind, dtype=torch.bfloat16, enabled=args.bf16)


@torch.no_grad()
def validate(model, proj, docs, W, C, batch, args, tok, full_cache):
    """NLL over rows t >= B of the val split, B = the mode's KV budget (the rows of `kvfold
    eval`'s "NLL ctx > budget"): memory mode, full context (computed once, kept in
    full_cache) and memory mode on the names probe at B."""
    tot_m = tot_f = tot_nm = n = nn = 0.0
    band = memory.window_band(proj, W)
    budget = memory.sink_count(proj) + proj.config["mem_slots"] + (band or W + C)
    for i in range(0, len(docs), batch):
        t, valid = batch_tokens(docs, list(range(i, min(i + batch, len(docs)))))
        w = row_weights(t, valid, budget, 0, 0.0)[:, :-1]
        names = name_rows(tok, t, valid, budget)[:, :-1]
        names = names * (torch.arange(names.shape[1])[None, :] >= budget)
        w, names = w.to(args.device), names.to(args.device)
        t = t.to(args.device)
        tgt = t[:, 1:]
        modes = [("m", lambda: memory.memory_logits(model, proj, t, window_size=W))]
        if i not in full_cache:
            modes.append(("f", lambda: memory.full_logits(model, t)))
        for acc, fn in modes:
            with autocast(args):
                logits = fn().float()
            nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                  tgt.reshape(-1), reduction="none").view_as(tgt)
            if acc == "m":
                tot_m += (nll * w).sum().item()
                tot_nm += (nll * names).sum().item()
            else:
                full_cache[i] = (nll * w).sum().item()
        tot_f += full_cache[i]
        n += w.sum().item()
        nn += names.sum().item()
    return tot_m / n, tot_f / n, tot_nm / max(nn, 1.0)


def memory_kv_geometry(args, cfg):
    """MemoryProjector keyword arguments of --memory-kv for the model config."""
    if not args.memory_kv:
        return {}
    return {"memory_kv_layers": cfg.num_layers, "memory_kv_dim": cfg.num_kv_heads * cfg.head_dim,
            "memory_kv_hidden": args.memory_kv_hidden}


def param_groups(proj, args):
    """The projector's parameters (absent with --freeze-projector) and the memory K/V maps
    (at --memory-kv-lr); "lr_scale" scales the schedule of lr_at per group."""
    kv = [p for n, p in proj.named_parameters() if n.startswith("mem_kv.")]
    base = [p for n, p in proj.named_parameters() if not n.startswith("mem_kv.")]
    if args.freeze_projector and kv:
        for p in base:
            p.requires_grad_(False)
    groups = [] if args.freeze_projector and kv else [{"params": base, "lr_scale": 1.0}]
    if kv:
        groups.append({"params": kv, "lr_scale": (args.memory_kv_lr or args.lr) / args.lr})
    return groups


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    p = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    W, C = args.window, args.chunk

    model = llama.load_model(args.model)
    model.to_device(args.device, torch.bfloat16 if args.bf16 else None)
    tok = load_tokenizer(args)
    need = args.sink_tokens + W + C + 2
    stream = None
    if args.stream:
        paths = args.text.split(",")
        val_st = [d for _, d in zip(range(args.val), data.iter_documents(paths))]
        stream = data.StreamBatches(paths, tok.encode, args.batch, args.max_len, need,
                                    args.seed, args.shuffle_buffer, skip_docs=len(val_st))
        train_docs = []
        print(f"streaming {paths}; val docs = the first {len(val_st)}", file=sys.stderr)
    else:
        stories = data.read_stories(args.text)
        train_st, _heldout = data.split_train_heldout(stories, args.heldout)
        train_st, val_st = train_st[:-args.val], train_st[-args.val:]
        train_docs = [d for d in data.encode_stories(tok, train_st, args.max_len,
                                                     args.token_cache) if len(d) >= need]
        print(f"train docs {len(train_docs)} (of {len(train_st)}), held out (unused) "
              f"{len(_heldout)}", file=sys.stderr)
    val_docs = [d for d in data.encode_stories(tok, val_st, args.val_max_len or args.max_len)
                if len(d) >= need]
    print(f"val docs {len(val_docs)}", file=sys.stderr)

    emb = model.w["model.embed_tokens.weight"]
    embed_rms = float(emb.pow(2).mean().sqrt())
    proj = projector.MemoryProjector(args.mem_slots, model.cfg.hidden_size, args.heads,
                                     args.ffn_mult, C, W, args.input_layers,
                                     embed_rms=embed_rms, seed=args.seed,
                                     window_policy=args.window_policy,
                                     sink_tokens=args.sink_tokens,
                                     prefix_gap=args.prefix_gap,
                                     memory_only_window=args.memory_only_window,
                                     **memory_kv_geometry(args, model.cfg)).to(args.device)
    if args.init_from:
        src = projector.MemoryProjector.load(args.init_from).state_dict()
        src["queries"] = src["queries"][:args.mem_slots]
        missing, unexpected = proj.load_state_dict(src, strict=False)
        if unexpected or any(not k.startswith("mem_kv.") for k in missing):
            raise SystemExit(f"--init-from {args.init_from}: missing {missing}, "
                             f"unexpected {unexpected}")
        print(f"weights from {args.init_from}" + (" (new: memory K/V maps)" if missing else ""),
              file=sys.stderr)
    opt = torch.optim.AdamW(param_groups(proj, args), lr=args.lr,
                            weight_decay=args.weight_decay)
    ckpt_path = os.path.join(args.out, "checkpoint.pt")
    log_path = os.path.join(args.out, "loss_curve.csv")
    step, history, elapsed0 = 0, [], 0.0
    if args.resume and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, map_location=args.device)
        proj.load_state_dict(ck["projector"])
        opt.load_state_dict(ck["optimizer"])
        step, history, elapsed0 = ck["step"], ck["history"], ck.get("elapsed", 0.0)
        if stream is not None:
            stream.skip(ck.get("stream_draws", 0))
        print(f"resumed at step {step}", file=sys.stderr)

    def save_ckpt():
        tmp = ckpt_path + ".tmp"
        torch.save({"projector": proj.state_dict(), "optimizer": opt.state_dict(),
                    "step": step, "history": history, "elapsed": elapsed,
                    "stream_draws": stream.draws if stream is not None else 0,
                    "args": vars(args)}, tmp)
        os.replace(tmp, ckpt_path)
        with open(log_path, "w", newline="") as f:
            wr = csv.writer(f)
            wr.writerow(["step", "loss", "nll", "kl", "lr", "val_mem_nll", "val_full_nll",
                         "val_mem_names_nll", "elapsed_s"])
            wr.writerows(history)

    fingerprint = model_fingerprint(args)
    per_epoch = max(1, len(train_docs) // args.batch)
    t0 = time.time()
    elapsed = elapsed0
    ema = None
    full_cache = {}
    last = min(args.steps, args.stop_at) if args.stop_at > 0 else args.steps
    while step < last:
        if args.max_seconds and elapsed >= args.max_seconds:
            print(f"\n--max-seconds reached after step {step}", file=sys.stderr)
            break
        if stream is not None:
            docs = stream.next_batch()
            idx = list(range(len(docs)))
        else:
            epoch, j = divmod(step, per_epoch)
            perm = np.random.default_rng(args.seed + epoch).permutation(len(train_docs))
            docs, idx = train_docs, perm[j * args.batch:(j + 1) * args.batch].tolist()
        step_rng = np.random.default_rng([args.seed, step])
        Wb = 0 if step_rng.random() < args.memory_only_frac else W
        tokens, valid = batch_tokens(docs, idx)
        names = (name_rows(tok, tokens, valid, Wb or C) if args.name_weight else None)
        weights = row_weights(tokens, valid, Wb, C, args.recall_weight,
                              memory.window_band(proj, Wb), args.sink_tokens, names,
                              args.name_weight).to(args.device)
        tokens = tokens.to(args.device)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args) * g["lr_scale"]
        with autocast(args):
            if args.kl_weight:
                with torch.no_grad():
                    teacher = memory.full_logits(model, tokens).float()
            else:  # NLL only: no teacher pass
                teacher = None
            student = memory.memory_logits(model, proj, tokens, window_size=Wb,
                                           grad_checkpoint=args.grad_checkpoint)
        loss, nll, kl = distill_loss(student.float(), teacher, tokens, weights,
                                     args.temperature, args.nll_weight, args.kl_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(proj.parameters(), 1.0)
        opt.step()
        step += 1
        elapsed = elapsed0 + time.time() - t0
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        vm = vf = vn = ""
        if args.val_every > 0 and (step % args.val_every == 0 or step == args.steps):
            vm, vf, vn = (round(x, 5) for x in validate(model, proj, val_docs, W, C,
                                                         args.batch, args, tok, full_cache))
            proj.save(os.path.join(args.out, "val", f"step_{step}"), fingerprint)
        history.append([step, round(loss.item(), 5), round(nll.item(), 5), round(kl.item(), 5),
                        f"{lr_at(step - 1, args):.3g}", vm, vf, vn, round(elapsed, 1)])
        bar = "#" * int(30 * step / args.steps)
        print(f"\r[{bar:<30}] step {step}/{args.steps} loss {loss.item():.4f} "
              f"(ema {ema:.4f}) nll {nll.item():.4f} kl {kl.item():.4f} W={Wb} "
              f"{elapsed:.0f}s" + (f" val mem {vm} full {vf} names {vn}" if vm != "" else ""),
              file=sys.stderr, end="\n" if vm != "" or step % 10 == 0 else "", flush=True)
        if step % args.ckpt_every == 0 or step == last:
            save_ckpt()
    print("", file=sys.stderr)
    save_ckpt()
    proj.save(args.out, fingerprint)
    with open(os.path.join(args.out, "train_config.json"), "w") as f:
        json.dump({"args": vars(args), "embed_rms": embed_rms,
                   "train_docs": len(train_docs), "val_docs": len(val_docs),
                   "elapsed_s": round(elapsed, 1)}, f, indent=2)
        f.write("\n")
    print(f"wrote {args.out}/projector.json, projector.safetensors", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
