// bench_memory_store: Put/Get ops/s and p50/p99 latency of kvfold-memory for 768 KiB and
// 1.5 MiB blocks, 1/8/32 concurrent clients, sync writes on and off, side by side with
// (a) RocksDB used directly in process on the same blocks and (b) MemoryStore in process
// (no gRPC), so that the store's and the service's overheads are ratios. Prints JSON.
//
//   bench_memory_store [--quick] [--seconds 2] [--dir /tmp] [--json-out FILE]
//   bench_memory_store --rados-conf ceph.conf [--rados-pool kvfold]   # the RADOS grid
#include <grpcpp/create_channel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/block_checksum.h"
#include "common/command_line.h"
#include "memory_svc/client/store_client.h"
#include "memory_svc/service/server.h"
#include "tools/bench_memory_store/bench_common.h"
#include "tools/bench_memory_store/rados_bench.h"
#include "tools/bench_memory_store/raw_rocksdb.h"

namespace kvfold::bench {
namespace {

// The command line (docs/cli.md).
struct Flags {
  bool quick = false;
  double seconds = 2.0;
  std::string clients = "1,8,32";
  std::string dir;
  std::string json_out;
  bool main_grid = true;
  bool blob_comparison = true;
  std::string rados_conf;
  std::string rados_pool = "kvfold";
};

void AddFlags(CLI::App& app, Flags& f) {
  kvfold::AddSwitch(app, "--quick", f.quick,
                    "short run: 0.25 s per cell, no blob/inline comparison");
  app.add_option("--seconds", f.seconds, "measured seconds per cell (put and get each)");
  app.add_option("--clients", f.clients, "concurrent client counts");
  app.add_option("--dir", f.dir, "scratch directory for the databases (default: TMPDIR)");
  app.add_option("--json-out", f.json_out, "also write the JSON here");
  kvfold::AddSwitch(app, "--main-grid", f.main_grid,
                    "run the variant x block x clients x sync grid");
  kvfold::AddSwitch(app, "--blob-comparison", f.blob_comparison,
                    "run BlobDB vs inline values (never with --quick)");
  app.add_option("--rados-conf", f.rados_conf,
                 "ceph.conf: run the RADOS grid (48 KiB and 768 KiB, rocksdb vs raw rados vs store "
                 "vs 1 and 2 replicas) instead of the RocksDB grids");
  app.add_option("--rados-pool", f.rados_pool, "pool for the RADOS grid");
}

absl::StatusOr<std::unique_ptr<Target>> MakeTarget(const std::string& variant,
                                                   const std::string& dir, bool sync, bool blob,
                                                   int clients) {
  if (variant == "rocksdb") {
    RawRocksDb::Options options;
    options.dir = dir;
    options.sync_writes = sync;
    options.enable_blob_files = blob;
    std::unique_ptr<RawRocksDb> db;
    if (absl::Status s = RawRocksDb::Open(options, &db); !s.ok()) return s;
    return std::unique_ptr<Target>(new RawTarget(std::move(db)));
  }
  memory_svc::StoreOptions store;
  store.db_dir = dir;
  store.sync_writes = sync;
  store.enable_blob_files = blob;
  if (variant == "store") {
    absl::StatusOr<std::unique_ptr<memory_svc::MemoryStore>> s = memory_svc::MemoryStore::Open(store);
    if (!s.ok()) return s.status();
    return std::unique_ptr<Target>(new StoreTarget(*std::move(s)));
  }
  memory_svc::ServerConfig config;
  config.listen = "127.0.0.1:0";
  config.insecure_no_auth = true;  // a local benchmark: no tokens
  config.store = store;
  absl::StatusOr<std::unique_ptr<memory_svc::MemoryServer>> server = memory_svc::MemoryServer::Start(config);
  if (!server.ok()) return server.status();
  std::vector<std::unique_ptr<memory_svc::MemoryServer>> servers;
  servers.push_back(*std::move(server));
  return std::unique_ptr<Target>(new ServiceTarget(std::move(servers), clients));
}

// One (variant, block, clients, sync, blob) combination on a fresh DB: puts for `seconds`,
// then gets of random retained versions for `seconds`.
absl::Status RunCombination(const std::string& variant, const std::vector<Block>& blocks,
                            int clients, bool sync, bool blob, double seconds,
                            const std::string& root, nlohmann::json* results) {
  const std::string dir = absl::StrCat(root, "/", variant, "-", clients, "-", sync, "-", blob);
  std::filesystem::remove_all(dir);
  {
    absl::StatusOr<std::unique_ptr<Target>> target = MakeTarget(variant, dir, sync, blob, clients);
    if (!target.ok()) return target.status();
    const auto [put, get] = PutThenGet(**target, blocks, clients, seconds, /*retained=*/16);
    const size_t block_bytes = blocks[0].payload.size();
    results->push_back(ToJson(put, "put", variant, block_bytes, clients, sync, blob));
    results->push_back(ToJson(get, "get", variant, block_bytes, clients, sync, blob));
    std::cerr << "bench: " << variant << " " << block_bytes << " B x" << clients
              << (sync ? " sync" : " nosync") << (blob ? " blob" : " inline") << ": put "
              << static_cast<int>(put.ops / put.seconds) << " ops/s, get "
              << static_cast<int>(get.ops / get.seconds) << " ops/s\n";
  }
  std::filesystem::remove_all(dir);
  return absl::OkStatus();
}

// Bytes this process handed to write() so far (WAL, flushes, compactions, blob files).
uint64_t ProcessWriteChars() {
  std::ifstream io("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "wchar:") return value;
  }
  return 0;
}

// BlobDB or not, on the raw baseline without sync: puts for `seconds`, then the LSM's
// background work to completion; write amplification = bytes written / payload bytes.
absl::Status RunBlobComparison(const std::vector<Block>& blocks, int clients, bool blob,
                               uint64_t blob_cache_bytes, double seconds,
                               const std::string& root, nlohmann::json* out) {
  const std::string dir = absl::StrCat(root, "/blobcmp-", clients, "-", blob);
  std::filesystem::remove_all(dir);
  {
    RawRocksDb::Options options;
    options.dir = dir;
    options.sync_writes = false;
    options.enable_blob_files = blob;
    options.blob_cache_bytes = blob_cache_bytes;
    std::unique_ptr<RawRocksDb> db;
    if (absl::Status s = RawRocksDb::Open(options, &db); !s.ok()) return s;
    RawRocksDb* raw = db.get();
    RawTarget target(std::move(db));
    std::vector<uint64_t> head(clients, 0);
    const uint64_t written_before = ProcessWriteChars();
    const CellResult put = PutCell(target, blocks, clients, seconds, head);
    if (absl::Status s = raw->FlushAndWaitIdle(); !s.ok()) return s;
    const uint64_t written = ProcessWriteChars() - written_before;
    const CellResult get = GetCell(target, clients, seconds, head, /*retained=*/16);
    const size_t block_bytes = blocks[0].payload.size();
    nlohmann::json p = ToJson(put, "put", "rocksdb", block_bytes, clients, false, blob);
    p["write_amplification"] = put.bytes ? static_cast<double>(written) / put.bytes : 0.0;
    p["blob_cache_bytes"] = blob_cache_bytes;
    out->push_back(p);
    nlohmann::json g = ToJson(get, "get", "rocksdb", block_bytes, clients, false, blob);
    g["blob_cache_bytes"] = blob_cache_bytes;
    out->push_back(g);
    std::cerr << "bench: blob=" << blob << " cache=" << blob_cache_bytes << " " << block_bytes << " B x" << clients << ": put "
              << static_cast<int>(put.ops / put.seconds) << " ops/s, write amp "
              << p["write_amplification"].get<double>() << ", get "
              << static_cast<int>(get.ops / get.seconds) << " ops/s\n";
  }
  std::filesystem::remove_all(dir);
  return absl::OkStatus();
}

int Main(const Flags& flags) {
  const bool quick = flags.quick;
  const double seconds = quick ? 0.25 : flags.seconds;
  std::vector<int> client_counts;
  for (absl::string_view s : absl::StrSplit(flags.clients, ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(s, &n) || n < 1) {
      std::cerr << "bench: bad --clients\n";
      return 2;
    }
    client_counts.push_back(n);
  }
  std::string root = flags.dir;
  if (root.empty()) root = std::filesystem::temp_directory_path().string();
  root += "/kvfold-bench-memory-store";
  std::filesystem::create_directories(root);

  if (!flags.rados_conf.empty()) {
    RadosGridOptions options;
    options.conf_file = flags.rados_conf;
    options.pool = flags.rados_pool;
    options.seconds = seconds;
    options.clients = client_counts;
    options.rocksdb_dir = root + "/rados-grid-rocksdb";
    nlohmann::json results = nlohmann::json::array();
    if (absl::Status s = RunRadosGrid(options, &results); !s.ok()) {
      std::cerr << "bench: " << s << "\n";
      return 1;
    }
    nlohmann::json out = {{"benchmark", "bench_memory_store"},
                          {"grid", "rados"},
                          {"seconds_per_cell", seconds},
                          {"hardware_threads", std::thread::hardware_concurrency()},
                          {"results", results}};
    std::cout << out.dump(2) << "\n";
    if (!flags.json_out.empty()) {
      std::ofstream(flags.json_out) << out.dump(2);
    }
    std::filesystem::remove_all(root);
    return 0;
  }
  const std::vector<std::vector<Block>> block_sets = {MakeBlocks(v1::DTYPE_FP16, 4),
                                                      MakeBlocks(v1::DTYPE_FP32, 4)};
  const std::vector<std::string> variants = {"rocksdb", "store", "service"};
  nlohmann::json results = nlohmann::json::array();
  for (const auto& blocks : block_sets) {
    if (!flags.main_grid) break;
    for (int clients : client_counts) {
      for (bool sync : {true, false}) {
        for (const std::string& variant : variants) {
          if (absl::Status s = RunCombination(variant, blocks, clients, sync, true, seconds, root,
                                              &results);
              !s.ok()) {
            std::cerr << "bench: " << s << "\n";
            return 1;
          }
        }
      }
    }
  }
  // BlobDB or not: the raw baseline with payloads inline in the LSM, no sync, 4x longer
  // puts so that compactions happen; write amplification measured.
  nlohmann::json blob_vs_inline = nlohmann::json::array();
  if (!quick && flags.blob_comparison) {
    for (const auto& blocks : block_sets) {
      for (int clients : {1, 8}) {
        // BlobDB with the store's blob cache, BlobDB without it, values inline.
        for (const auto& [blob, cache] : {std::pair<bool, uint64_t>{true, 256ull << 20},
                                          {true, 0}, {false, 0}}) {
          if (absl::Status s = RunBlobComparison(blocks, clients, blob, cache, 4 * seconds, root,
                                                 &blob_vs_inline);
              !s.ok()) {
            std::cerr << "bench: " << s << "\n";
            return 1;
          }
        }
      }
    }
  }
  // Ratios against the raw RocksDB baseline of the same cell.
  nlohmann::json ratios = nlohmann::json::array();
  for (const auto& r : results) {
    if (r["variant"] == "rocksdb") continue;
    for (const auto& base : results) {
      if (base["variant"] != "rocksdb" || base["op"] != r["op"] ||
          base["block_bytes"] != r["block_bytes"] || base["clients"] != r["clients"] ||
          base["sync"] != r["sync"]) {
        continue;
      }
      ratios.push_back({{"op", r["op"]},
                        {"variant", r["variant"]},
                        {"block_bytes", r["block_bytes"]},
                        {"clients", r["clients"]},
                        {"sync", r["sync"]},
                        {"ops_ratio_vs_rocksdb", r["ops_per_s"].get<double>() /
                                                     std::max(1e-9, base["ops_per_s"].get<double>())},
                        {"p50_ratio_vs_rocksdb", r["p50_ms"].get<double>() /
                                                     std::max(1e-9, base["p50_ms"].get<double>())}});
    }
  }
  nlohmann::json out = {{"benchmark", "bench_memory_store"},
                        {"seconds_per_cell", seconds},
                        {"quick", quick},
                        {"hardware_threads", std::thread::hardware_concurrency()},
                        {"results", results},
                        {"ratios", ratios},
                        {"blob_vs_inline", blob_vs_inline}};
  const std::string text = out.dump(2);
  std::cout << text << "\n";
  if (!flags.json_out.empty()) std::ofstream(flags.json_out) << text;
  std::filesystem::remove_all(root);
  return 0;
}

}  // namespace
}  // namespace kvfold::bench

int main(int argc, char** argv) {
  CLI::App app{
      "Put/Get throughput and latency of kvfold-memory against RocksDB and MemoryStore in process "
      "(JSON).",
      "bench_memory_store"};
  kvfold::ApplyConvention(app);
  kvfold::bench::Flags flags;
  kvfold::bench::AddFlags(app, flags);
  if (std::optional<int> rc = kvfold::ParseCommandLine(app, argc, argv)) return *rc;
  return kvfold::bench::Main(flags);
}
