#include "common/block_checksum.h"
#include "common/checksum.h"
#include "common/sha256.h"

#include <gtest/gtest.h>

namespace kvfold {
namespace {

TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 h;
  h.Update("a");
  h.Update("bc");
  EXPECT_EQ(h.HexDigest(), Sha256Hex("abc"));
}

TEST(Xxh3Test, IncrementalEqualsOneShot) {
  std::string data(10007, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 + 7);
  Xxh3Hasher h;
  h.Update(data.data(), 3);
  h.Update(data.data() + 3, data.size() - 3);
  EXPECT_EQ(h.Digest(), Xxh3(data.data(), data.size()));
  EXPECT_NE(Xxh3(data.data(), data.size() - 1), Xxh3(data.data(), data.size()));
}

TEST(BlockChecksumTest, IgnoresTheChecksumFieldAndCoversHeaderAndPayload) {
  v1::MemoryBlockHeader h;
  h.set_format_version(1);
  h.set_mem_slots(16);
  h.set_hidden_size(64);
  h.add_window_token_ids(5);
  const std::string payload(16 * 64 * 2, 'x');
  const uint64_t c = BlockChecksum(h, payload);
  h.set_checksum(c);
  EXPECT_EQ(BlockChecksum(h, payload), c);  // the stored checksum does not feed itself
  h.set_total_tokens(1);
  EXPECT_NE(BlockChecksum(h, payload), c);  // header fields are covered
  h.set_total_tokens(0);
  std::string flipped = payload;
  flipped[100] ^= 1;
  EXPECT_NE(BlockChecksum(h, flipped), c);  // payload bits are covered
  BlockChecksummer s(h);
  s.Update(std::string_view(payload).substr(0, 1000));
  s.Update(std::string_view(payload).substr(1000));
  EXPECT_EQ(s.Digest(), c);
}

}  // namespace
}  // namespace kvfold
