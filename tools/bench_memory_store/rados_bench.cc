#include "tools/bench_memory_store/rados_bench.h"

#include <rados/librados.hpp>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "tools/bench_memory_store/bench_common.h"

namespace kvfold::bench {
namespace {

// The retention of every variant: few versions, so that the memstore OSDs of a dev cluster
// hold 32 clients x 768 KiB blocks.
constexpr uint32_t kRetained = 4;

// Plain librados, the floor under the store: object "raw.<client>.<version>", written
// whole; the version kRetained back is removed like the store's retention does.
class RawRadosTarget : public Target {
 public:
  explicit RawRadosTarget(librados::IoCtx& io) : io_(io) {}
  absl::Status Put(int client, uint64_t version, const Block& block) override {
    librados::bufferlist bl;
    bl.append(block.payload.data(), block.payload.size());
    if (int r = io_.write_full(Name(client, version), bl); r < 0) {
      return absl::UnavailableError(absl::StrCat("rados write: ", r));
    }
    if (version > kRetained) io_.remove(Name(client, version - kRetained));
    return absl::OkStatus();
  }
  absl::Status Get(int client, uint64_t version, size_t* bytes) override {
    librados::bufferlist bl;
    if (int r = io_.read(Name(client, version), bl, 0, 0); r < 0) {
      return absl::UnavailableError(absl::StrCat("rados read: ", r));
    }
    *bytes = bl.length();
    return absl::OkStatus();
  }

 private:
  static std::string Name(int client, uint64_t version) {
    return absl::StrCat("raw.", client, ".", version);
  }
  librados::IoCtx& io_;
};

memory_svc::StoreOptions RadosStoreOptions(const RadosGridOptions& o, const std::string& ns) {
  memory_svc::StoreOptions options;
  options.backend = memory_svc::BackendKind::kRados;
  options.rados.conf_file = o.conf_file;
  options.rados.pool = o.pool;
  options.rados.name_space = ns;
  options.versions_kept = kRetained;
  return options;
}

absl::StatusOr<std::unique_ptr<Target>> MakeRadosTarget(const std::string& variant,
                                                        const RadosGridOptions& o,
                                                        const std::string& ns,
                                                        librados::IoCtx& io, int clients) {
  if (variant == "raw_rados") return std::unique_ptr<Target>(new RawRadosTarget(io));
  memory_svc::StoreOptions options = RadosStoreOptions(o, ns);
  if (variant == "store_rocksdb") {
    options = memory_svc::StoreOptions();
    options.db_dir = o.rocksdb_dir;
    options.versions_kept = kRetained;
    options.sync_writes = true;  // RADOS acknowledges once every replica has the write
  }
  if (variant == "store_rocksdb" || variant == "store_rados") {
    absl::StatusOr<std::unique_ptr<memory_svc::MemoryStore>> s = memory_svc::MemoryStore::Open(options);
    if (!s.ok()) return s.status();
    return std::unique_ptr<Target>(new StoreTarget(*std::move(s)));
  }
  const int replicas = variant == "service_rados_2" ? 2 : 1;
  std::vector<std::unique_ptr<memory_svc::MemoryServer>> servers;
  for (int i = 0; i < replicas; ++i) {
    memory_svc::ServerConfig config;
    config.listen = "127.0.0.1:0";
    config.store = options;
    absl::StatusOr<std::unique_ptr<memory_svc::MemoryServer>> server =
        memory_svc::MemoryServer::Start(config);
    if (!server.ok()) return server.status();
    servers.push_back(*std::move(server));
  }
  return std::unique_ptr<Target>(new ServiceTarget(std::move(servers), clients));
}

// Removes every object of the namespace the cell used.
void EmptyNamespace(librados::IoCtx& io) {
  std::vector<std::string> names;
  try {
    for (auto it = io.nobjects_begin(); it != io.nobjects_end(); ++it) {
      names.push_back(it->get_oid());
    }
  } catch (const std::exception& e) {
    std::cerr << "bench: listing the namespace failed: " << e.what() << "\n";
  }
  for (const std::string& name : names) io.remove(name);
}

}  // namespace

absl::Status RunRadosGrid(const RadosGridOptions& o, nlohmann::json* results) {
  librados::Rados cluster;
  if (cluster.init2("client.admin", "ceph", 0) < 0 ||
      cluster.conf_read_file(o.conf_file.c_str()) < 0 || cluster.connect() < 0) {
    return absl::UnavailableError(absl::StrCat("cannot connect to the cluster of ", o.conf_file));
  }
  librados::IoCtx io;
  if (cluster.ioctx_create(o.pool.c_str(), io) < 0) {
    cluster.shutdown();
    return absl::NotFoundError(absl::StrCat("no pool ", o.pool));
  }
  // 48 KiB: 24 x 1024 fp16; 768 KiB: the Llama-3.1-8B block (96 x 4096 fp16).
  const std::vector<std::vector<Block>> block_sets = {MakeBlocks(v1::DTYPE_FP16, 4, 24, 1024),
                                                      MakeBlocks(v1::DTYPE_FP16, 4)};
  const std::vector<std::string> variants = {"store_rocksdb", "raw_rados", "store_rados",
                                             "service_rados_1", "service_rados_2"};
  absl::Status status;
  int cell = 0;
  for (const auto& blocks : block_sets) {
    for (int clients : o.clients) {
      for (const std::string& variant : variants) {
        const std::string ns = absl::StrCat("bench-", getpid(), "-", cell++);
        io.set_namespace(ns);
        std::filesystem::remove_all(o.rocksdb_dir);
        {
          absl::StatusOr<std::unique_ptr<Target>> target =
              MakeRadosTarget(variant, o, ns, io, clients);
          if (!target.ok()) {
            status = target.status();
            break;
          }
          const auto [put, get] = PutThenGet(**target, blocks, clients, o.seconds, kRetained);
          const size_t block_bytes = blocks[0].payload.size();
          for (auto [cell_result, op] : {std::pair{put, "put"}, std::pair{get, "get"}}) {
            nlohmann::json j = ToJson(cell_result, op, variant, block_bytes, clients,
                                      /*sync=*/true, /*blob=*/variant == "store_rocksdb");
            j["grid"] = "rados";
            results->push_back(j);
          }
          std::cerr << "bench: rados grid " << variant << " " << block_bytes << " B x" << clients
                    << ": put " << static_cast<int>(put.ops / put.seconds) << " ops/s, get "
                    << static_cast<int>(get.ops / get.seconds) << " ops/s\n";
        }
        EmptyNamespace(io);
      }
      if (!status.ok()) break;
    }
    if (!status.ok()) break;
  }
  std::filesystem::remove_all(o.rocksdb_dir);
  io.close();
  cluster.shutdown();
  return status;
}

}  // namespace kvfold::bench
