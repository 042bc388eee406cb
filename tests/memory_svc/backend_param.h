// Store tests run on both backends: RocksDB in a temp dir, and RADOS in a fresh namespace of
// the pool of the cluster that scripts/ceph_dev.sh started for the `ceph`-labelled tests
// (KVFOLD_CEPH_CONF, KVFOLD_CEPH_POOL). Without that cluster the RADOS instances skip and
// say so; the `ceph` tests run them.
#ifndef KVFOLD_TESTS_MEMORY_SVC_BACKEND_PARAM_H_
#define KVFOLD_TESTS_MEMORY_SVC_BACKEND_PARAM_H_

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "absl/strings/str_format.h"
#include "memory_svc/store/memory_store.h"

namespace kvfold::memory_svc::testing {

// The ceph.conf of the test cluster; empty when none runs (the fixture could not start one:
// the Ceph packages are missing).
inline std::string CephConf() {
  const char* conf = std::getenv("KVFOLD_CEPH_CONF");
  if (conf == nullptr || !std::filesystem::exists(conf)) return std::string();
  return std::string(conf);
}

inline std::string CephPool() {
  const char* pool = std::getenv("KVFOLD_CEPH_POOL");
  return pool == nullptr || *pool == '\0' ? std::string("kvfold") : std::string(pool);
}

// The client.admin keyring of a cephx test cluster; empty with auth none.
inline std::string CephKeyring() {
  const char* keyring = std::getenv("KVFOLD_CEPH_KEYRING");
  return keyring == nullptr ? std::string() : std::string(keyring);
}

inline constexpr char kCephSkipMessage[] =
    "no Ceph test cluster (KVFOLD_CEPH_CONF unset or no such file): the RADOS instances run "
    "in the ceph-labelled tests (ctest -L ceph), which start one with scripts/ceph_dev.sh "
    "when the Ceph packages are installed";

// A namespace no other test uses.
inline std::string FreshNamespace() {
  std::random_device rd;
  return absl::StrFormat("test-%08x%08x", rd(), rd());
}

// Options for `backend` ("rocksdb" or "rados"): RocksDB in `dir`, RADOS in `name_space`.
inline StoreOptions BackendOptions(const std::string& backend, const std::string& dir,
                                   const std::string& name_space) {
  StoreOptions options;
  options.sync_writes = false;  // tests do not need fsync; crash_test covers durability
  if (backend == "rados") {
    options.backend = BackendKind::kRados;
    options.rados.conf_file = CephConf();
    options.rados.pool = CephPool();
    options.rados.name_space = name_space;
    options.rados.keyring_file = CephKeyring();
  } else {
    options.db_dir = dir;
  }
  return options;
}

inline std::string BackendName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

}  // namespace kvfold::memory_svc::testing

#endif  // KVFOLD_TESTS_MEMORY_SVC_BACKEND_PARAM_H_
