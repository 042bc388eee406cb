// Test helpers for memory_svc: seeded random blocks with valid checksums, temp dirs.
#ifndef KVFOLD_TESTS_MEMORY_SVC_TEST_BLOCKS_H_
#define KVFOLD_TESTS_MEMORY_SVC_TEST_BLOCKS_H_

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "common/block_checksum.h"
#include "kvfold/v1/common.pb.h"

namespace kvfold::memory_svc::testing {

struct TestBlock {
  v1::MemoryBlockHeader header;
  std::string payload;
};

// A sealed block (payload_size and checksum set) of mem_slots x hidden_size elements.
inline TestBlock MakeBlock(uint64_t seed, uint32_t mem_slots = 7, uint32_t hidden_size = 72,
                           v1::Dtype dtype = v1::DTYPE_FP16) {
  TestBlock block;
  v1::MemoryBlockHeader& h = block.header;
  h.set_format_version(1);
  h.set_model_fingerprint("model-" + std::to_string(seed % 5));
  h.set_mem_slots(mem_slots);
  h.set_hidden_size(hidden_size);
  h.set_dtype(dtype);
  h.set_tokens_folded(seed * 32);
  h.set_total_tokens(seed * 32 + 17);
  for (int i = 0; i < 5; ++i) h.add_window_token_ids(static_cast<int32_t>(seed * 7 + i));
  h.set_kv_mode(v1::KV_MODE_MEMORY);
  h.set_window_size(64);
  h.set_chunk_size(32);
  const size_t elem = dtype == v1::DTYPE_FP32 ? 4 : (dtype == v1::DTYPE_INT8 ? 1 : 2);
  block.payload.resize(static_cast<size_t>(mem_slots) * hidden_size * elem);
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  for (char& c : block.payload) c = static_cast<char>(rng());
  h.set_payload_size(block.payload.size());
  h.set_checksum(BlockChecksum(h, block.payload));
  return block;
}

// A fresh directory under TMPDIR, removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvfold-mem-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace kvfold::memory_svc::testing

#endif  // KVFOLD_TESTS_MEMORY_SVC_TEST_BLOCKS_H_
