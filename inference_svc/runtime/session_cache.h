// A byte-bounded LRU cache of live sessions (derived KV only; the store holds the truth).
//
// Values are shared_ptr so that an entry evicted while a turn is running on it stays alive
// until the turn ends; the cache only drops its reference. Thread-safe.
#ifndef KVFOLD_INFERENCE_SVC_RUNTIME_SESSION_CACHE_H_
#define KVFOLD_INFERENCE_SVC_RUNTIME_SESSION_CACHE_H_

#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace kvfold::runtime {

template <typename V>
class LruByteCache {
 public:
  // capacity_bytes: the sum of entry sizes kept; 0 disables caching (Put drops at once).
  explicit LruByteCache(size_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  // The entry (moved to most-recently-used), or nullptr.
  std::shared_ptr<V> Get(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->value;
  }

  // Inserts or replaces `key` with `bytes` accounted, then evicts least-recently-used
  // entries until the total fits. Returns the evicted values (callers may release them
  // outside the lock; an entry larger than the capacity is itself evicted at once).
  std::vector<std::shared_ptr<V>> Put(const std::string& key, std::shared_ptr<V> value,
                                      size_t bytes) {
    std::vector<std::shared_ptr<V>> evicted;
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      used_bytes_ -= it->second->bytes;
      evicted.push_back(std::move(it->second->value));
      order_.erase(it->second);
      index_.erase(it);
    }
    order_.push_front(Entry{key, std::move(value), bytes});
    index_[key] = order_.begin();
    used_bytes_ += bytes;
    while (used_bytes_ > capacity_bytes_ && !order_.empty()) {
      Entry& victim = order_.back();
      used_bytes_ -= victim.bytes;
      evicted.push_back(std::move(victim.value));
      index_.erase(victim.key);
      order_.pop_back();
    }
    return evicted;
  }

  // Removes `key`; returns its value or nullptr.
  std::shared_ptr<V> Erase(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    std::shared_ptr<V> value = std::move(it->second->value);
    used_bytes_ -= it->second->bytes;
    order_.erase(it->second);
    index_.erase(it);
    return value;
  }

  // Removes the least recently used entry whose key `skip` does not accept; returns its
  // value, or nullptr when every entry is skipped (or none is left).
  std::shared_ptr<V> PopLeastRecent(const std::function<bool(const std::string&)>& skip) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
      if (skip(it->key)) continue;
      std::shared_ptr<V> value = std::move(it->value);
      used_bytes_ -= it->bytes;
      index_.erase(it->key);
      order_.erase(std::next(it).base());
      return value;
    }
    return nullptr;
  }

  // Removes every entry; returns the values (released by the caller, outside the lock).
  std::vector<std::shared_ptr<V>> Clear() {
    std::vector<std::shared_ptr<V>> values;
    std::lock_guard<std::mutex> lock(mu_);
    for (Entry& e : order_) values.push_back(std::move(e.value));
    order_.clear();
    index_.clear();
    used_bytes_ = 0;
    return values;
  }

  size_t used_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return used_bytes_;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return index_.size();
  }
  size_t capacity_bytes() const { return capacity_bytes_; }

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<V> value;
    size_t bytes;
  };
  const size_t capacity_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> order_;  // front = most recently used
  absl::flat_hash_map<std::string, typename std::list<Entry>::iterator> index_;
  size_t used_bytes_ = 0;
};

}  // namespace kvfold::runtime

#endif  // KVFOLD_INFERENCE_SVC_RUNTIME_SESSION_CACHE_H_
