#!/usr/bin/python3
"""scripts/bench_vs_llamacpp_table.py reads the runs it is given and pairs them right.

Writes result files of the shape bench_engine (JSON `models[].results[]`) and llama-bench
(`-o json`) write, with known speeds, and checks the printed rows: the medians of each
side, their ratio, and the per-rep ratios, which pair each kvfold run with the llama.cpp
run of the same rep number (reps 1 .. 11, so "10" and "11" sort between "1" and "2" as
text), leaving out a rep whose llama.cpp run wrote nothing.

usage: bench_vs_llamacpp_table_test.py SCRIPT
"""
import json
import os
import re
import subprocess
import sys
import tempfile


def kvfold_doc(decode_short, decode_long, prefill):
    return {"cpu_isa": "avx512", "models": [{"results": [
        {"mode": "full", "context": 1, "decode_tok_s": decode_short, "prefill_tok_s": 1.0,
         "triad_roofline_tok_s": 100.0},
        {"mode": "full", "context": 128, "decode_tok_s": decode_long, "prefill_tok_s": prefill},
    ]}]}


def llama_doc(decode, prefill):
    return [{"n_prompt": 128, "n_gen": 0, "avg_ts": prefill, "build_commit": "abc1234"},
            {"n_prompt": 0, "n_gen": 32, "avg_ts": decode, "build_commit": "abc1234"}]


def row(out, label):
    for line in out.splitlines():
        if line.startswith(f"| {label} |"):
            return [c.strip() for c in line.strip("|").split("|")]
    raise SystemExit(f"no row {label!r} in:\n{out}")


def main():
    script = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        # kvfold decode 100 + rep, llama.cpp 50 + rep: per-rep ratios (100 + r) / (50 + r).
        for rep in range(1, 12):
            with open(os.path.join(d, f"s110_f32_t1.kvfold.{rep}.json"), "w") as f:
                json.dump(kvfold_doc(100.0 + rep, 90.0 + rep, 1000.0 + rep), f)
            if rep == 7:  # llama.cpp wrote nothing for this rep
                open(os.path.join(d, f"s110_f32_t1.llama.{rep}.json"), "w").close()
                continue
            with open(os.path.join(d, f"s110_f32_t1.llama.{rep}.json"), "w") as f:
                json.dump(llama_doc(50.0 + rep, 500.0), f)
        out = subprocess.run([sys.executable, script, d], capture_output=True, text=True,
                             check=True, timeout=60).stdout
    assert "build_commit: abc1234" in out, out
    dec = row(out, "decode 32 tokens from an empty context, 1 thr")
    # kvfold: median of 101 .. 111 = 106; llama.cpp: median of 51 .. 61 without 57 = 55.5.
    assert dec[1] == "106.0" and dec[2] == "55.5", dec
    assert dec[3] == f"{106.0 / 55.5:.2f}x", dec
    ratios = sorted((100.0 + r) / (50.0 + r) for r in range(1, 12) if r != 7)
    med = (ratios[4] + ratios[5]) / 2
    assert dec[4] == f"{med:.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})", dec
    assert dec[5] == "11", dec
    long = row(out, "decode 32 tokens, kvfold after the 128-token prompt, 1 thr")
    ratios = sorted((90.0 + r) / (50.0 + r) for r in range(1, 12) if r != 7)
    assert long[1] == "96.0", long
    assert long[4] == f"{(ratios[4] + ratios[5]) / 2:.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})", long
    pre = row(out, "prefill 128 tokens, 1 thr")
    assert pre[1] == "1,006.0" and pre[2] == "500.0" and pre[3] == "2.01x", pre
    assert re.search(r"\| f32 decode, 1 thr \| 106\.0 \| 100\.0 \| 106 % \| 11 \|", out), out
    print("ok")


if __name__ == "__main__":
    main()
