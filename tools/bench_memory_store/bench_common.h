// bench_memory_store's shared pieces: blocks, the Target interface (one way of putting and
// getting blocks) with its RocksDB, MemoryStore and gRPC-service implementations, and the
// timed cell runner.
#ifndef KVFOLD_TOOLS_BENCH_MEMORY_STORE_BENCH_COMMON_H_
#define KVFOLD_TOOLS_BENCH_MEMORY_STORE_BENCH_COMMON_H_

#include <grpcpp/create_channel.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/block_checksum.h"
#include "memory_svc/client/store_client.h"
#include "memory_svc/service/server.h"
#include "memory_svc/store/memory_store.h"
#include "tools/bench_memory_store/raw_rocksdb.h"

namespace kvfold::bench {

using Clock = std::chrono::steady_clock;

struct Block {
  v1::MemoryBlockHeader header;
  std::string payload;
};

// `count` random blocks of mem_slots x hidden_size; the default is the Llama-3.1-8B block
// (96 x 4096 fp16 = 768 KiB; 1.5 MiB in fp32).
inline std::vector<Block> MakeBlocks(v1::Dtype dtype, int count, uint32_t mem_slots = 96,
                                     uint32_t hidden_size = 4096) {
  std::vector<Block> blocks(count);
  std::mt19937_64 rng(42 + dtype);
  for (Block& b : blocks) {
    b.header.set_format_version(1);
    b.header.set_mem_slots(mem_slots);
    b.header.set_hidden_size(hidden_size);
    b.header.set_dtype(dtype);
    b.header.set_total_tokens(rng() % 100000);
    b.payload.resize(size_t{mem_slots} * hidden_size * (dtype == v1::DTYPE_FP32 ? 4 : 2));
    for (size_t i = 0; i < b.payload.size(); i += 8) {
      const uint64_t r = rng();
      std::memcpy(&b.payload[i], &r, 8);
    }
    memory_svc::SealBlockHeader(&b.header, b.payload);
  }
  return blocks;
}

// One way of putting and getting blocks: raw RocksDB, MemoryStore, or the gRPC service.
class Target {
 public:
  virtual ~Target() = default;
  // Writes version `version` (= expected_head + 1) of client `client`'s session.
  virtual absl::Status Put(int client, uint64_t version, const Block& block) = 0;
  virtual absl::Status Get(int client, uint64_t version, size_t* bytes) = 0;
};

inline std::string SessionOf(int client) { return absl::StrCat("bench-", client); }

class RawTarget : public Target {
 public:
  explicit RawTarget(std::unique_ptr<RawRocksDb> db) : db_(std::move(db)) {}
  absl::Status Put(int client, uint64_t version, const Block& block) override {
    return db_->Put(client, version, block.payload);
  }
  absl::Status Get(int client, uint64_t version, size_t* bytes) override {
    thread_local std::string buffer;
    absl::Status s = db_->Get(client, version, &buffer);
    if (!s.ok()) buffer.clear();
    *bytes = buffer.size();
    return s;
  }

 private:
  std::unique_ptr<RawRocksDb> db_;
};

class StoreTarget : public Target {
 public:
  explicit StoreTarget(std::unique_ptr<memory_svc::MemoryStore> store) : store_(std::move(store)) {}
  absl::Status Put(int client, uint64_t version, const Block& block) override {
    return store_->Put("bench", SessionOf(client), version - 1, block.header, block.payload, false)
        .status();
  }
  absl::Status Get(int client, uint64_t version, size_t* bytes) override {
    absl::StatusOr<memory_svc::StoredBlock> b = store_->Get("bench", SessionOf(client), version);
    if (!b.ok()) return b.status();
    *bytes = b->payload.size();
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<memory_svc::MemoryStore> store_;
};

class ServiceTarget : public Target {
 public:
  // Client c talks to servers[c % servers.size()] (replicas sharing one backend).
  ServiceTarget(std::vector<std::unique_ptr<memory_svc::MemoryServer>> servers, int clients)
      : servers_(std::move(servers)) {
    for (int c = 0; c < clients; ++c) {  // one channel (connection) per client
      grpc::ChannelArguments args = memory_svc::StoreChannelArguments();
      args.SetInt("bench_client", c);  // distinct args: distinct subchannels
      clients_.push_back(std::make_unique<memory_svc::StoreClient>(grpc::CreateCustomChannel(
          servers_[c % servers_.size()]->address(), grpc::InsecureChannelCredentials(), args)));
    }
  }
  ~ServiceTarget() override {
    for (auto& server : servers_) server->Shutdown(absl::Seconds(5)).IgnoreError();
  }
  absl::Status Put(int client, uint64_t version, const Block& block) override {
    return clients_[client]->Put(SessionOf(client), version - 1, block.header, block.payload)
        .status();
  }
  absl::Status Get(int client, uint64_t version, size_t* bytes) override {
    absl::StatusOr<memory_svc::StoreBlock> b = clients_[client]->Get(SessionOf(client), version);
    if (!b.ok()) return b.status();
    *bytes = b->payload.size();
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<memory_svc::MemoryServer>> servers_;
  std::vector<std::unique_ptr<memory_svc::StoreClient>> clients_;
};

struct CellResult {
  uint64_t ops = 0;
  uint64_t errors = 0;
  double seconds = 0;
  double p50_ms = 0, p99_ms = 0;
  uint64_t bytes = 0;
};

// Runs `op(client, i)` on `clients` threads for `seconds`; latency percentiles over all ops.
inline CellResult RunCell(int clients, double seconds,
                   const std::function<absl::Status(int, uint64_t, size_t*)>& op) {
  std::vector<std::vector<double>> latencies(clients);
  std::vector<uint64_t> errors(clients, 0), bytes(clients, 0);
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      for (uint64_t i = 0; Clock::now() < deadline; ++i) {
        const Clock::time_point t0 = Clock::now();
        size_t n = 0;
        const absl::Status s = op(c, i, &n);
        latencies[c].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        if (!s.ok()) {
          if (errors[c]++ == 0) std::cerr << "bench: " << s << "\n";
        }
        bytes[c] += n;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CellResult r;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (int c = 0; c < clients; ++c) {
    all.insert(all.end(), latencies[c].begin(), latencies[c].end());
    r.errors += errors[c];
    r.bytes += bytes[c];
  }
  r.ops = all.size() - r.errors;
  std::sort(all.begin(), all.end());
  if (!all.empty()) {
    r.p50_ms = all[all.size() / 2];
    r.p99_ms = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  }
  return r;
}

inline nlohmann::json ToJson(const CellResult& r, const char* op, const std::string& variant,
                      size_t block_bytes, int clients, bool sync, bool blob) {
  return {{"op", op},
          {"variant", variant},
          {"block_bytes", block_bytes},
          {"clients", clients},
          {"sync", sync},
          {"blob_files", blob},
          {"ops", r.ops},
          {"errors", r.errors},
          {"ops_per_s", r.ops / r.seconds},
          {"mib_per_s", r.bytes / r.seconds / (1 << 20)},
          {"p50_ms", r.p50_ms},
          {"p99_ms", r.p99_ms}};
}

// Puts for `seconds`: client c writes versions head[c] + 1, ... of its session and
// advances head[c] (sized to `clients`, zeros for fresh sessions).
inline CellResult PutCell(Target& target, const std::vector<Block>& blocks, int clients,
                          double seconds, std::vector<uint64_t>& head) {
  return RunCell(clients, seconds, [&](int c, uint64_t i, size_t* n) {
    const Block& b = blocks[(c + i) % blocks.size()];
    absl::Status s = target.Put(c, head[c] + 1, b);
    if (s.ok()) {
      ++head[c];
      *n = b.payload.size();
    }
    return s;
  });
}

// Gets for `seconds` of random versions among each client's newest `retained`.
inline CellResult GetCell(Target& target, int clients, double seconds,
                          const std::vector<uint64_t>& head, uint64_t retained) {
  std::vector<std::mt19937_64> rngs;
  for (int c = 0; c < clients; ++c) rngs.emplace_back(c);
  return RunCell(clients, seconds, [&](int c, uint64_t, size_t* n) {
    if (head[c] == 0) return absl::FailedPreconditionError("client wrote nothing");
    return target.Get(c, head[c] - rngs[c]() % std::min<uint64_t>(head[c], retained), n);
  });
}

inline std::pair<CellResult, CellResult> PutThenGet(Target& target,
                                                    const std::vector<Block>& blocks,
                                                    int clients, double seconds,
                                                    uint64_t retained) {
  std::vector<uint64_t> head(clients, 0);
  const CellResult put = PutCell(target, blocks, clients, seconds, head);
  return {put, GetCell(target, clients, seconds, head, retained)};
}

}  // namespace kvfold::bench

#endif  // KVFOLD_TOOLS_BENCH_MEMORY_STORE_BENCH_COMMON_H_
