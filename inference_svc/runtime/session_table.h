// SessionTable: the replica's idle sessions (a byte-bounded LRU cache of derived KV) and
// the sessions a turn is running on (claims). One turn per session per replica: a second
// Claim on a key fails before the second turn reads anything. Eviction skips claimed
// sessions, so a turn's cached copy is never dropped under it. Thread-safe.
#ifndef KVFOLD_INFERENCE_SVC_RUNTIME_SESSION_TABLE_H_
#define KVFOLD_INFERENCE_SVC_RUNTIME_SESSION_TABLE_H_

#include <memory>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "inference_svc/runtime/live_session.h"
#include "inference_svc/runtime/session_cache.h"

namespace kvfold::runtime {

class SessionTable {
 public:
  // cache_bytes: budget of idle sessions' resident KV; 0 keeps none.
  explicit SessionTable(size_t cache_bytes) : cache_(cache_bytes) {}

  // True when `key` was free and is now claimed by the caller.
  bool Claim(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    return claimed_.insert(key).second;
  }
  void Release(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    claimed_.erase(key);
  }

  // The cached copy (moved to most recently used), or nullptr.
  std::shared_ptr<LiveSession> Get(const std::string& key) { return cache_.Get(key); }
  // Caches `live` (accounted at its resident KV bytes); least recently used entries beyond
  // the budget are dropped (their engine sessions retire once unreferenced).
  void Put(const std::string& key, std::shared_ptr<LiveSession> live) {
    const size_t bytes = live->kv_bytes_resident.load() + 1;
    auto evicted = cache_.Put(key, std::move(live), bytes);
    evicted.clear();  // released here, outside the cache's lock
  }
  void Erase(const std::string& key) { auto dropped = cache_.Erase(key); }

  // Removes and returns the least recently used cached session that no turn has claimed;
  // nullptr when there is none.
  std::shared_ptr<LiveSession> EvictIdle() {
    std::lock_guard<std::mutex> lock(mu_);
    return cache_.PopLeastRecent([this](const std::string& key) { return claimed_.contains(key); });
  }

  size_t cached_bytes() const { return cache_.used_bytes(); }
  size_t cached_sessions() const { return cache_.size(); }

 private:
  std::mutex mu_;
  absl::flat_hash_set<std::string> claimed_;
  LruByteCache<LiveSession> cache_;
};

}  // namespace kvfold::runtime

#endif  // KVFOLD_INFERENCE_SVC_RUNTIME_SESSION_TABLE_H_
