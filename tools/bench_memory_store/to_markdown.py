#!/usr/bin/env python3
"""Turns bench_memory_store's JSON into the markdown tables of docs/memory-store.md.

    bench_memory_store --json-out bench.json && python3 to_markdown.py bench.json
"""
import json
import sys


def rados_grid(data):
    """The RADOS grid (bench_memory_store --rados-conf): one row per (op, block, clients)."""
    rows = {}
    for r in data["results"]:
        rows.setdefault((r["op"], r["block_bytes"], r["clients"]), {})[r["variant"]] = r
    print("| op | block | clients | MemoryStore on RocksDB | raw rados | MemoryStore on RADOS | "
          "service, 1 replica | service, 2 replicas | store RADOS / raw | 2 / 1 replicas |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (op, size, clients), cells in sorted(
            rows.items(), key=lambda kv: (kv[0][0] != "put", kv[0][1], kv[0][2])):
        def fmt(v):
            r = cells.get(v)
            return "-" if r is None else f"{r['ops_per_s']:.0f} ({r['p50_ms']:.1f}/{r['p99_ms']:.1f})"

        def ops(v):
            return cells.get(v, {}).get("ops_per_s", 0) or 1e-9
        label = "768 KiB" if size == 786432 else "48 KiB" if size == 49152 else str(size)
        print(f"| {op} | {label} | {clients} | {fmt('store_rocksdb')} | {fmt('raw_rados')} | "
              f"{fmt('store_rados')} | {fmt('service_rados_1')} | {fmt('service_rados_2')} | "
              f"{ops('store_rados') / ops('raw_rados'):.2f} | "
              f"{ops('service_rados_2') / ops('service_rados_1'):.2f} |")


def main(path):
    data = json.load(open(path))
    if data.get("grid") == "rados":
        rados_grid(data)
        return
    rows = {}
    for r in data["results"]:
        key = (r["op"], r["block_bytes"], r["clients"], r["sync"])
        rows.setdefault(key, {})[r["variant"]] = r
    print("| op | block | clients | sync | RocksDB ops/s (p50/p99 ms) | MemoryStore ops/s "
          "(p50/p99 ms) | service ops/s (p50/p99 ms) | service / RocksDB ops | store / RocksDB ops |")
    print("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for key in sorted(rows, key=lambda k: (k[0] != "put", k[1], k[3] is False, k[2])):
        op, size, clients, sync = key
        cells = rows[key]

        def fmt(v):
            r = cells.get(v)
            if r is None:
                return "-"
            return f"{r['ops_per_s']:.0f} ({r['p50_ms']:.1f}/{r['p99_ms']:.1f})"

        base = cells.get("rocksdb", {}).get("ops_per_s", 0) or 1e-9
        svc = cells.get("service", {}).get("ops_per_s", 0)
        sto = cells.get("store", {}).get("ops_per_s", 0)
        label = "768 KiB" if size == 786432 else "1.5 MiB" if size == 1572864 else str(size)
        print(f"| {op} | {label} | {clients} | {'on' if sync else 'off'} | {fmt('rocksdb')} | "
              f"{fmt('store')} | {fmt('service')} | {svc / base:.2f} | {sto / base:.2f} |")
    if data.get("blob_vs_inline"):
        print()
        print("| op | block | clients | BlobDB + blob cache ops/s (MiB/s) | BlobDB, no cache | "
              "inline values | write amp. BlobDB | write amp. inline |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        groups = {}
        for r in data["blob_vs_inline"]:
            kind = "inline" if not r["blob_files"] else (
                "cache" if r.get("blob_cache_bytes", 0) else "nocache")
            groups.setdefault((r["op"], r["block_bytes"], r["clients"]), {})[kind] = r
        for (op, size, clients), g in sorted(
                groups.items(), key=lambda kv: (kv[0][0] != "put", kv[0][1], kv[0][2])):
            label = "768 KiB" if size == 786432 else "1.5 MiB"

            def cell(kind):
                r = g.get(kind)
                return "-" if r is None else f"{r['ops_per_s']:.0f} ({r['mib_per_s']:.0f})"

            def amp(kind):
                r = g.get(kind)
                return "-" if r is None or op != "put" else f"{r.get('write_amplification', 0):.2f}"

            print(f"| {op} | {label} | {clients} | {cell('cache')} | {cell('nocache')} | "
                  f"{cell('inline')} | {amp('cache')} | {amp('inline')} |")

if __name__ == "__main__":
    main(sys.argv[1])
