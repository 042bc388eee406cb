#!/usr/bin/python3
"""`bench_engine --isa-probe` prints one JSON document of what one core sustains.

Checks: exit 0 and nothing else on stdout; every key present; VNNI reported as
/proc/cpuinfo has it; rates null exactly where the CPU lacks the instructions, else
within what a core can retire per cycle of the dependent add chain; the Q8 block mix
(eight vpdpbusd then a convert, multiply and fma) runs no faster than vpdpbusd alone,
nor below half of it; the engine's 16-row Q8 MatMul reports a known path and a positive
rate; per_cpu has one entry for each CPU this process may run on, in order, with the
same entries null as the top level and rates a core can deliver.

usage: isa_probe_test.py BENCH_ENGINE
"""
import json
import os
import subprocess
import sys


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def main():
    out = subprocess.run([sys.argv[1], "--isa-probe"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    for key in ("cpu_isa", "cpu_best_isa", "avx512_vnni", "int_add_chain_g_s", "fma_zmm_g_s",
                "vpdpbusd_zmm_g_s", "vpdpbusd_q8_block_g_s", "q8_panel_16_rows"):
        assert key in d, key
    assert d["int_add_chain_g_s"] > 0.1, d
    avx512 = d["cpu_best_isa"] == "avx512"
    vnni = d["avx512_vnni"]
    # The CPU's own flags: AVX-512 VNNI is used only where cpuid has it (and AVX-512 is on).
    assert vnni == (avx512 and "avx512_vnni" in cpu_flags()), d
    assert (d["fma_zmm_g_s"] is not None) == avx512, d
    assert (d["vpdpbusd_zmm_g_s"] is not None) == vnni, d
    assert (d["vpdpbusd_q8_block_g_s"] is not None) == vnni, d
    clock = d["int_add_chain_g_s"]
    if avx512:
        # Every AVX-512 core retires at least one 512-bit FMA per cycle or so (the dependent
        # add chain runs at one per cycle on AMD cores; on an Intel Xeon model 207 it ran at
        # 11-12 G/s beside 5.5 G/s of FMAs and 4.0 of vpdpbusd, so the lower bound is a
        # quarter); a wrong instruction count per loop would miss by more.
        assert 0.25 * clock <= d["fma_zmm_g_s"] <= 4.5 * clock, d
    if vnni:
        assert 0.25 * clock <= d["vpdpbusd_zmm_g_s"] <= 4.5 * clock, d
        # The mix adds three instructions per eight vpdpbusd: no faster than vpdpbusd alone
        # (5 % for timing noise), and not below 8 / 11 of it even if all share one port.
        ratio = d["vpdpbusd_q8_block_g_s"] / d["vpdpbusd_zmm_g_s"]
        assert 0.5 <= ratio <= 1.05, d
    p = d["q8_panel_16_rows"]
    assert p["path"] in ("amx", "vnni_panels", "vnni_lanes", "other"), p
    assert p["gmac_s"] > 0 and abs(p["vpdpbusd_g_s"] * 64 - p["gmac_s"]) < 1e-6 * p["gmac_s"], p
    assert (p["over_q8_block_mix"] is not None) == vnni, p
    per_cpu = d["per_cpu"]
    assert [c["cpu"] for c in per_cpu] == sorted(os.sched_getaffinity(0)), per_cpu
    for c in per_cpu:
        own = c["int_add_chain_g_s"]
        assert own > 0.1, c
        assert (c["fma_zmm_g_s"] is not None) == avx512, c
        assert (c["vpdpbusd_zmm_g_s"] is not None) == vnni, c
        for key in ("fma_zmm_g_s", "vpdpbusd_zmm_g_s"):
            # A median over ~0.3 s: a core shared with a busy neighbour may deliver well
            # under one per cycle, never more than the core can retire.
            if c[key] is not None:
                assert 0 < c[key] <= 4.5 * own, c
        # One thread reading 128 MiB line by line: more than a slow disk, less than any
        # memory system's whole bandwidth.
        assert 0.1 < c["read_gb_s"] < 2000, c
    print("ok:", json.dumps(d))


if __name__ == "__main__":
    main()
