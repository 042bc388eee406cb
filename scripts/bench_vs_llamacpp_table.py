#!/usr/bin/env python3
"""Table of scripts/bench_vs_llamacpp.sh: medians per row and kvfold / llama.cpp."""
import glob
import json
import os
import statistics
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def kvfold_values(doc):
    r = doc["models"][0]["results"][0]
    return {
        "prefill": r.get("prefill_tok_s"),
        "decode": r.get("decode_tok_s"),
        "roofline": r.get("read_roofline_tok_s"),
        "bytes": r.get("bytes_per_decode_token"),
        "isa": doc.get("cpu_isa", "?"),
    }


def llama_values(doc):
    out = {}
    for r in doc:
        if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
            out["prefill"] = r["avg_ts"]
        if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
            out["decode"] = r["avg_ts"]
        out["bytes"] = r.get("model_size")
    return out


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main():
    d = sys.argv[1]
    names = sorted({os.path.basename(p).split(".")[0] for p in glob.glob(os.path.join(d, "*.json"))})
    rows = []
    isa = "?"
    for name in names:
        kv = [kvfold_values(load(p)) for p in sorted(glob.glob(os.path.join(d, name + ".kvfold.*.json")))]
        ll = [llama_values(load(p)) for p in sorted(glob.glob(os.path.join(d, name + ".llama.*.json")))]
        if kv:
            isa = kv[0]["isa"]
        threads = name.rsplit("_t", 1)[1]
        label = {"s110_f32": "stories110m f32", "s110_q8": "stories110m q8 vs Q8_0",
                 "s260_10k": "stories260K 10240-token prompt (full)"}[name.rsplit("_t", 1)[0]]
        phases = ["prefill"] if name.startswith("s260") else ["prefill", "decode"]
        for phase in phases:
            a, b = median([k[phase] for k in kv]), median([l.get(phase) for l in ll])
            rows.append((f"{label}, {phase}, {threads} thr", a, b, len(kv)))
        if not name.startswith("s260"):
            dec, roof = median([k["decode"] for k in kv]), median([k["roofline"] for k in kv])
            rows.append((f"{label}, decode vs read roofline, {threads} thr", dec, roof, len(kv)))
    print(f"| row (tok/s; kvfold cpu isa: {isa}) | kvfold | llama.cpp (or roofline) | ratio | reps |")
    print("| --- | --- | --- | --- | --- |")
    for label, a, b, n in rows:
        ratio = f"{a / b:.2f}x" if a and b else "-"
        fa = f"{a:,.1f}" if a else "-"
        fb = f"{b:,.1f}" if b else "-"
        print(f"| {label} | {fa} | {fb} | {ratio} | {n} |")


if __name__ == "__main__":
    main()
