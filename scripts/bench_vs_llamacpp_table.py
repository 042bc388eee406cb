#!/usr/bin/env python3
"""Tables of scripts/bench_vs_llamacpp.sh: one per target, medians over the interleaved reps.

The ratio column is median(kvfold) / median(llama.cpp); beside it, the median and range of
the per-rep ratios (kvfold's run over the llama.cpp run right after it): the host's memory
moves from minute to minute, and a pair measured in the same minute cancels most of that.

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
        "row_prefetch": doc.get("cpu_row_prefetch"),
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


def kvfold_batch(doc):
    """{sequences: decode tok/s} of bench_engine's batch_decode."""
    sizes = doc.get("batch_decode", {}).get("sizes", [])
    return {r["sequences"]: r.get("decode_tok_s") for r in sizes}


def llama_batch(doc):
    """{parallel sequences: decode tok/s} of llama-batched-bench's JSON lines."""
    return {r["pl"]: r.get("speed_tg") for r in doc if "pl" in r}


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x):
    return f"{x:,.1f}" if x else "-"


def pair_ratios(kv_reps, ll_reps, kv_key, ll_key):
    """kvfold / llama.cpp per rep measured on both sides (reps keyed by their number)."""
    out = []
    for rep, k in kv_reps.items():
        a, b = k.get(kv_key), ll_reps.get(rep, {}).get(ll_key)
        if a and b:
            out.append(a / b)
    return out


def fmt_pairs(ratios):
    if not ratios:
        return "-"
    return f"{median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


def table(title, target, header, rows):
    print(f"### {title}  (target: {target})\n")
    print(f"| {header} | kvfold | llama.cpp | ratio | per-rep ratio: median (range) | reps |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, a, b, ratios, n in rows:
        ratio = f"{a / b:.2f}x" if a and b else "-"
        print(f"| {label} | {fmt(a)} | {fmt(b)} | {ratio} | {fmt_pairs(ratios)} | {n} |")
    print()


def rep_of(path):
    """The rep number of results/NAME.SIDE.REP.json."""
    try:
        return int(os.path.basename(path).split(".")[-2])
    except ValueError:
        return None


def load_reps(d, name, side, values):
    """{rep: values(doc)} of the side's runs that wrote a JSON."""
    out = {}
    for p in glob.glob(os.path.join(d, f"{name}.{side}.*.json")):
        doc, rep = load(p), rep_of(p)
        if doc and rep is not None:
            out[rep] = values(doc)
    return out


def batch_table(d, names):
    """Each engine's one and 16 sequences, 16 over one per rep (both sizes of one run), and
    kvfold over llama.cpp at 16 sequences."""
    rows = []
    for weights in ("f32", "q8"):
        for t in (1, 2):
            name = f"batch_{weights}_t{t}"
            if name not in names:
                continue
            kv = load_reps(d, name, "kvfold", kvfold_batch)
            ll = load_reps(d, name, "llama", llama_batch)
            kv_one = median([r.get(1) for r in kv.values()])
            kv_16 = median([r.get(16) for r in kv.values()])
            ll_one = median([r.get(1) for r in ll.values()])
            ll_16 = median([r.get(16) for r in ll.values()])
            kv_over = median([r[16] / r[1] for r in kv.values() if r.get(1) and r.get(16)])
            ll_over = median([r[16] / r[1] for r in ll.values() if r.get(1) and r.get(16)])
            at_16 = pair_ratios({k: {"v": r.get(16)} for k, r in kv.items()},
                                {k: {"v": r.get(16)} for k, r in ll.items()}, "v", "v")
            label = "f32" if weights == "f32" else "q8 / Q8_0"
            rows.append((f"{label}, {t} thr", kv_one, kv_16, kv_over, ll_one, ll_16, ll_over,
                         at_16, len(kv)))
    if not rows:
        return
    print("### stories110m shape, batched decode: 16 sequences against one  (no target: "
          "the batching target is bench_service's)\n")
    print("8-token prompts, 128 decode steps, fp16 KV; decode tok/s of all sequences together, "
          "medians over the reps; 16 / 1: the median of the runs' own ratios.\n")
    print("| weights, threads | kvfold one | kvfold 16 | kvfold 16 / 1 | llama.cpp one | "
          "llama.cpp 16 | llama.cpp 16 / 1 | kvfold / llama.cpp at 16: per-rep median (range) "
          "| reps |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, ko, k16, kx, lo, l16, lx, at_16, n in rows:
        kx_s = f"{kx:.2f}x" if kx else "-"
        lx_s = f"{lx:.2f}x" if lx else "-"
        print(f"| {label} | {fmt(ko)} | {fmt(k16)} | {kx_s} | {fmt(lo)} | {fmt(l16)} | {lx_s} "
              f"| {fmt_pairs(at_16)} | {n} |")
    print()


def main():
    d = sys.argv[1]
    commit = sys.argv[2] if len(sys.argv) > 2 else ""
    all_names = {os.path.basename(p).split(".")[0] for p in glob.glob(os.path.join(d, "*.json"))}
    batch_names = {n for n in all_names if n.startswith("batch_")}
    names = sorted(all_names - batch_names)
    kv_reps = {name: load_reps(d, name, "kvfold", kvfold_values) for name in names}
    ll_reps = {name: load_reps(d, name, "llama", llama_values) for name in names}
    kv = {name: [v for _, v in sorted(r.items())] for name, r in kv_reps.items()}
    ll = {name: [v for _, v in sorted(r.items())] for name, r in ll_reps.items()}
    isa = next((k[0]["isa"] for k in kv.values() if k), None)
    for name in sorted(batch_names):
        docs = load_reps(d, name, "kvfold", lambda doc: doc.get("cpu_isa"))
        isa = isa or next((v for v in docs.values() if v), None)
    isa = isa or "?"
    prefetch = next((k[0]["row_prefetch"] for k in kv.values() if k), None)
    if prefetch is not None:
        isa += f", one-row prefetch {'on' if prefetch else 'off'}"
    reported = sorted({l.get("commit") for v in ll.values() for l in v} - {None, "", "unknown"})
    if reported:
        commit = ", ".join(reported)
    elif not commit or commit == "unknown":
        commit = "unknown (llama-bench reports none and the binaries sit in no git checkout)"
    print(f"kvfold cpu isa: {isa}; llama.cpp build_commit: {commit}\n")

    def pair(name, phase, kv_phase=None):
        kv_phase = kv_phase or phase
        return (median([k[kv_phase] for k in kv.get(name, [])]),
                median([l.get(phase) for l in ll.get(name, [])]),
                pair_ratios(kv_reps.get(name, {}), ll_reps.get(name, {}), kv_phase, phase),
                len(kv.get(name, [])))

    def rows_for(prefix):
        out = []
        for t in (1, 2):
            name = f"{prefix}_t{t}"
            if name not in kv:
                continue
            ctx = kv[name][0]["long_context"] if kv[name] else 0
            out.append((f"prefill {ctx} tokens, {t} thr", *pair(name, "prefill")))
            out.append((f"decode 32 tokens from an empty context, {t} thr", *pair(name, "decode")))
            if any(k["decode_long"] for k in kv[name]):
                out.append((f"decode 32 tokens, kvfold after the {ctx}-token prompt, {t} thr",
                            *pair(name, "decode", "decode_long")))
        return out

    f32 = rows_for("s110_f32")
    if f32:
        table("stories110m shape, f32 weights", ">= 1.0x", "phase (tok/s)", f32)
    q8 = rows_for("s110_q8")
    if q8:
        table("stories110m shape, kvfold q8 vs llama.cpp Q8_0", "decode >= 1.0x", "phase (tok/s)", q8)
    q4k = rows_for("s110_q4k")
    if q4k:
        table("stories110m shape, one Q4_K_M GGUF file on both sides (kvfold holds it as Q8)",
              "none", "phase (tok/s)", q4k)
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
    batch_table(d, batch_names)


if __name__ == "__main__":
    main()
