#!/usr/bin/env python3
"""Tables of scripts/bench_vs_llamacpp.sh: one per target, medians over the interleaved reps.

usage: bench_vs_llamacpp_table.py RESULTS_DIR [LLAMA_COMMIT]
"""
import glob
import json
import os
import statistics
import sys


def load(path):
    """The JSON a run wrote, or None when it wrote none (a failed or unfinished run)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def kvfold_values(doc):
    """Prefill from the longest context's row; decode from the shortest context's row (the
    one matching llama-bench's decode from an empty context) and the longest's."""
    rows = sorted(doc["models"][0]["results"], key=lambda r: r["context"])
    short, long = rows[0], rows[-1]
    return {
        "prefill": long.get("prefill_tok_s"),
        "decode": short.get("decode_tok_s"),
        "decode_long": long.get("decode_tok_s") if len(rows) > 1 else None,
        "long_context": long["context"],
        "triad_roofline": short.get("triad_roofline_tok_s"),
        "isa": doc.get("cpu_isa", "?"),
    }


def llama_values(doc):
    out = {}
    for r in doc:
        if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
            out["prefill"] = r["avg_ts"]
        if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
            out["decode"] = r["avg_ts"]
        out["commit"] = r.get("build_commit")
    return out


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x):
    return f"{x:,.1f}" if x else "-"


def table(title, target, header, rows):
    print(f"### {title}  (target: {target})\n")
    print(f"| {header} | kvfold | llama.cpp | ratio | reps |")
    print("| --- | --- | --- | --- | --- |")
    for label, a, b, n in rows:
        ratio = f"{a / b:.2f}x" if a and b else "-"
        print(f"| {label} | {fmt(a)} | {fmt(b)} | {ratio} | {n} |")
    print()


def main():
    d = sys.argv[1]
    commit = sys.argv[2] if len(sys.argv) > 2 else ""
    names = sorted({os.path.basename(p).split(".")[0] for p in glob.glob(os.path.join(d, "*.json"))})
    kv, ll = {}, {}
    for name in names:
        docs = [load(p) for p in sorted(glob.glob(os.path.join(d, name + ".kvfold.*.json")))]
        kv[name] = [kvfold_values(doc) for doc in docs if doc]
        docs = [load(p) for p in sorted(glob.glob(os.path.join(d, name + ".llama.*.json")))]
        ll[name] = [llama_values(doc) for doc in docs if doc]
    isa = next((k[0]["isa"] for k in kv.values() if k), "?")
    reported = sorted({l.get("commit") for v in ll.values() for l in v} - {None, "", "unknown"})
    if reported:
        commit = ", ".join(reported)
    elif not commit or commit == "unknown":
        commit = "unknown (llama-bench reports none and the binaries sit in no git checkout)"
    print(f"kvfold cpu isa: {isa}; llama.cpp build_commit: {commit}\n")

    def pair(name, phase):
        return (median([k[phase] for k in kv.get(name, [])]),
                median([l.get(phase) for l in ll.get(name, [])]), len(kv.get(name, [])))

    def rows_for(prefix):
        out = []
        for t in (1, 2):
            name = f"{prefix}_t{t}"
            if name not in kv:
                continue
            ctx = kv[name][0]["long_context"] if kv[name] else 0
            out.append((f"prefill {ctx} tokens, {t} thr", *pair(name, "prefill")))
            out.append((f"decode 32 tokens from an empty context, {t} thr", *pair(name, "decode")))
            dl = median([k["decode_long"] for k in kv[name]])
            if dl:
                out.append((f"decode 32 tokens, kvfold after the {ctx}-token prompt, {t} thr",
                            dl, pair(name, "decode")[1], len(kv[name])))
        return out

    f32 = rows_for("s110_f32")
    if f32:
        table("stories110m shape, f32 weights", ">= 1.0x", "phase (tok/s)", f32)
    q8 = rows_for("s110_q8")
    if q8:
        table("stories110m shape, kvfold q8 vs llama.cpp Q8_0", "decode >= 1.0x", "phase (tok/s)", q8)
    long_rows = [(f"prefill, {t} thr", *pair(f"s260_10k_t{t}", "prefill"))
                 for t in (1, 2) if f"s260_10k_t{t}" in kv]
    if long_rows:
        table("stories260K, 10240-token prompt, full mode", ">= 1.0x", "phase (tok/s)", long_rows)
    roof = []
    for name, label in (("s110_f32", "f32"), ("s110_q8", "q8")):
        for t in (1, 2):
            ks = kv.get(f"{name}_t{t}", [])
            if ks:
                dec = median([k["decode"] for k in ks])
                tri = median([k["triad_roofline"] for k in ks])
                roof.append((f"{label} decode, {t} thr", dec, tri, len(ks)))
    if roof:
        print("### stories110m shape decode vs the STREAM triad roofline  (target: >= 80 %)\n")
        print("| row | kvfold tok/s | roofline tok/s (triad bytes/s / bytes per token) | fraction | reps |")
        print("| --- | --- | --- | --- | --- |")
        for label, a, b, n in roof:
            frac = f"{a / b * 100:.0f} %" if a and b else "-"
            print(f"| {label} | {fmt(a)} | {fmt(b)} | {frac} | {n} |")
        print()


if __name__ == "__main__":
    main()
