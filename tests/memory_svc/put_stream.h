// Streams of puts whose blocks are a function of (client, version), so that any version
// found in the store, acknowledged or not, can be checked byte for byte; shared by the
// crash tests of the process (crash_test.cc) and of the cluster (ceph_test.cc).
#ifndef KVFOLD_TESTS_MEMORY_SVC_PUT_STREAM_H_
#define KVFOLD_TESTS_MEMORY_SVC_PUT_STREAM_H_

#include <grpcpp/create_channel.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "memory_svc/client/store_client.h"
#include "tests/memory_svc/test_blocks.h"

namespace kvfold::memory_svc::testing {

// Every third version is a 768 KiB block (Llama-3.1-8B), the others 48 KB.
inline TestBlock BlockFor(int c, uint64_t version) {
  const uint64_t seed = static_cast<uint64_t>(c) * 1'000'003 + version;
  if (version % 3 == 0) return MakeBlock(seed, 96, 4096);
  return MakeBlock(seed, 24, 1000);
}

inline std::string SessionOf(int c) { return absl::StrCat("crash-", c); }

inline StoreClient ClientFor(const std::string& address) {
  return StoreClient(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

// Every acknowledged version (acked[c] for client c) is present; every present version is
// intact and is exactly the block that was sent for it; versions are 1..latest without
// holes (retention must be off) and the head is the latest. Returns the heads.
inline std::vector<uint64_t> VerifyStreams(const std::string& address,
                                           const std::vector<std::set<uint64_t>>& acked) {
  StoreClient client = ClientFor(address);
  std::vector<uint64_t> heads(acked.size(), 0);
  for (size_t c = 0; c < acked.size(); ++c) {
    const int id = static_cast<int>(c);
    absl::StatusOr<v1::ListVersionsResponse> list = client.ListVersions(SessionOf(id));
    if (!list.ok()) {
      EXPECT_EQ(list.status().code(), absl::StatusCode::kNotFound) << list.status();
      EXPECT_TRUE(acked[c].empty()) << "client " << c << " lost its whole session";
      continue;
    }
    std::set<uint64_t> present;
    for (const v1::VersionInfo& info : list->versions()) {
      present.insert(info.version());
      absl::StatusOr<StoreBlock> got = client.Get(SessionOf(id), info.version());
      EXPECT_TRUE(got.ok()) << "client " << c << " version " << info.version() << ": "
                            << got.status();
      if (!got.ok()) continue;
      const TestBlock expected = BlockFor(id, info.version());
      EXPECT_EQ(got->payload, expected.payload) << "client " << c << " v" << info.version();
      EXPECT_EQ(got->header.SerializeAsString(), expected.header.SerializeAsString());
    }
    for (uint64_t v : acked[c]) {
      EXPECT_TRUE(present.count(v)) << "client " << c << " lost acknowledged version " << v;
    }
    EXPECT_EQ(present.size(), list->session().latest_version());
    EXPECT_EQ(list->session().head_version(), list->session().latest_version());
    heads[c] = list->session().head_version();
  }
  return heads;
}

}  // namespace kvfold::memory_svc::testing

#endif  // KVFOLD_TESTS_MEMORY_SVC_PUT_STREAM_H_
