#!/usr/bin/python3
"""scripts/bench_vs_llamacpp_table.py reads the runs it is given and pairs them right.

Writes result files of the shape bench_engine (JSON `models[].results[]`) and llama-bench
(`-o json`) write, with known speeds, and checks the printed rows: the medians of each
side, their ratio, and the per-rep ratios, which pair each kvfold run with the llama.cpp
run of the same rep number (reps 1 .. 11, so "10" and "11" sort between "1" and "2" as
text), leaving out a rep whose llama.cpp run wrote nothing. The batch row's files (bench_engine's
`batch_decode`, llama-batched-bench's JSON lines gathered into an array) give each
engine's one and 16 sequences and 16 over one per run.

usage: bench_vs_llamacpp_table_test.py SCRIPT
"""
import json
import os
import re
import subprocess
import sys
import tempfile


def kvfold_doc(decode_short, decode_long, prefill):
    return {"cpu_isa": "avx512", "cpu_row_prefetch": False, "models": [{"results": [
        {"mode": "full", "context": 1, "decode_tok_s": decode_short, "prefill_tok_s": 1.0,
         "triad_roofline_tok_s": 100.0},
        {"mode": "full", "context": 128, "decode_tok_s": decode_long, "prefill_tok_s": prefill},
    ]}]}


def llama_doc(decode, prefill):
    return [{"n_prompt": 128, "n_gen": 0, "avg_ts": prefill, "build_commit": "abc1234"},
            {"n_prompt": 0, "n_gen": 32, "avg_ts": decode, "build_commit": "abc1234"}]


def kvfold_batch_doc(one, sixteen):
    return {"cpu_isa": "avx512", "models": [], "batch_decode": {"sizes": [
        {"sequences": 1, "decode_tok_s": one}, {"sequences": 16, "decode_tok_s": sixteen}]}}


def llama_batch_doc(one, sixteen):
    return [{"pp": 8, "tg": 128, "pl": 1, "speed_tg": one},
            {"pp": 8, "tg": 128, "pl": 16, "speed_tg": sixteen}]


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
        # The Q4_K_M row at 2 threads, one rep: kvfold decode 300, llama.cpp 250.
        with open(os.path.join(d, "s110_q4k_t2.kvfold.1.json"), "w") as f:
            json.dump(kvfold_doc(300.0, 280.0, 2000.0), f)
        with open(os.path.join(d, "s110_q4k_t2.llama.1.json"), "w") as f:
            json.dump(llama_doc(250.0, 800.0), f)
        # Batch, q8 at 2 threads, reps 1 .. 5: kvfold one 200 + rep, 16 sequences 1000 + 100
        # * rep; llama.cpp one 100, 16 sequences 300 + rep, and nothing written for rep 3.
        for rep in range(1, 6):
            with open(os.path.join(d, f"batch_q8_t2.kvfold.{rep}.json"), "w") as f:
                json.dump(kvfold_batch_doc(200.0 + rep, 1000.0 + 100 * rep), f)
            with open(os.path.join(d, f"batch_q8_t2.llama.{rep}.json"), "w") as f:
                if rep != 3:
                    json.dump(llama_batch_doc(100.0, 300.0 + rep), f)
        run = subprocess.run([sys.executable, script, d], capture_output=True, text=True,
                             timeout=60)
        assert run.returncode == 0, run.stderr
        out = run.stdout
    assert "build_commit: abc1234" in out, out
    assert "kvfold cpu isa: avx512, one-row prefetch off;" in out, out
    assert "### stories110m shape, one Q4_K_M GGUF file on both sides (kvfold holds it as Q8)" \
        "  (target: none)" in out, out
    q4k = row(out, "decode 32 tokens from an empty context, 2 thr")
    assert q4k[1:4] == ["300.0", "250.0", "1.20x"], q4k
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
    batch = row(out, "q8 / Q8_0, 2 thr")
    kv_over = sorted((1000.0 + 100 * r) / (200.0 + r) for r in range(1, 6))[2]
    at_16 = sorted((1000.0 + 100 * r) / (300.0 + r) for r in (1, 2, 4, 5))
    assert batch[1:7] == ["203.0", "1,300.0", f"{kv_over:.2f}x", "100.0", "303.0", "3.03x"], batch
    assert batch[7] == f"{(at_16[1] + at_16[2]) / 2:.2f}x ({at_16[0]:.2f}-{at_16[-1]:.2f})", batch
    assert batch[8] == "5", batch
    assert "f32, 1 thr |" not in out, out
    print("ok")


if __name__ == "__main__":
    main()
