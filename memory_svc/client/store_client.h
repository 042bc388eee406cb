// StoreClient: the C++ client of kvfold-memory (MemoryStore), for inference_svc and tools.
//
//   auto channel = grpc::CreateChannel("127.0.0.1:7070", grpc::InsecureChannelCredentials());
//   kvfold::StoreClient store(channel, /*bearer_token=*/"");
//   kvfold::SealBlockHeader(&header, payload);             // payload_size + checksum
//   absl::StatusOr<v1::PutBlockResponse> put = store.Put("s1", /*expected_head=*/0,
//                                                        header, payload);
//   absl::StatusOr<kvfold::StoreBlock> block = store.Get("s1");   // head
//
// Every method returns the server's status translated by FromGrpcStatus (see the code
// table in proto/kvfold/v1/memory_store.proto): ABORTED when a compare-and-set loses (the
// message names the current head), NOT_FOUND for unknown sessions or versions, DATA_LOSS
// for checksum mismatches (Get also verifies the checksum on the client), UNAVAILABLE when
// the server cannot be reached, DEADLINE_EXCEEDED when the per-call timeout passes.
// Thread-safe: one StoreClient may be shared by many threads.
#ifndef KVFOLD_MEMORY_SVC_CLIENT_STORE_CLIENT_H_
#define KVFOLD_MEMORY_SVC_CLIENT_STORE_CLIENT_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kvfold/v1/common.pb.h"
#include "kvfold/v1/memory_store.grpc.pb.h"

namespace kvfold::memory_svc {

struct StoreCallOptions {
  // Deadline of the whole call, measured from its start. Default: 30 s.
  absl::Duration timeout = absl::Seconds(30);
  // Wait for the channel to become ready instead of failing fast with UNAVAILABLE.
  bool wait_for_ready = false;
  // The bearer token of this call, in place of the client's own ("" = no authorization
  // metadata). One client on one channel thus serves any number of callers without keeping
  // anything per caller. Default: unset (the client's token).
  std::optional<std::string> bearer_token;
};

struct StorePutOptions {
  bool pin = false;                // pin the new version (exempt from retention)
  size_t chunk_bytes = 256 << 10;  // payload bytes per stream message, 1 B .. 1 MiB
  StoreCallOptions call;
};

// One version as read back (checksum verified).
struct StoreBlock {
  v1::VersionInfo info;
  v1::MemoryBlockHeader header;
  std::string payload;
};

// Channel arguments tuned for 0.5-2 MiB blocks: an 8 MiB HTTP/2 stream window, so that a
// whole block is in flight at once instead of the window growing from 64 KiB per stream
// (2-3x faster GetBlock in bench_memory_store), and 64 MiB messages both ways (the first
// message carries the header, which lists a full-mode session's whole history).
grpc::ChannelArguments StoreChannelArguments();

// grpc::CreateCustomChannel(target, credentials, StoreChannelArguments()).
std::shared_ptr<grpc::Channel> CreateStoreChannel(
    const std::string& target, const std::shared_ptr<grpc::ChannelCredentials>& credentials);

// Sets header->payload_size = payload.size() and header->checksum to the block checksum
// (common/block_checksum.h), as the store requires.
void SealBlockHeader(v1::MemoryBlockHeader* header, absl::string_view payload);

class StoreClient {
 public:
  // bearer_token empty = no authorization metadata (a server without a tokens file).
  explicit StoreClient(std::shared_ptr<grpc::Channel> channel, std::string bearer_token = "");

  // Streams a new version; commits iff the head still equals expected_head_version (0 =
  // create the session). The header must be sealed (SealBlockHeader). INVALID_ARGUMENT for
  // chunk_bytes outside 1..1 MiB (checked locally).
  absl::StatusOr<v1::PutBlockResponse> Put(absl::string_view session_id,
                                           uint64_t expected_head_version,
                                           const v1::MemoryBlockHeader& header,
                                           absl::string_view payload,
                                           const StorePutOptions& options = {});

  // Reads version `version` (0 = head) and verifies offsets, size and checksum locally
  // (DATA_LOSS on mismatch). chunk_bytes 0 = the server default.
  absl::StatusOr<StoreBlock> Get(absl::string_view session_id, uint64_t version = 0,
                                 const StoreCallOptions& options = {}, uint32_t chunk_bytes = 0);

  absl::StatusOr<v1::SessionInfo> GetSessionInfo(absl::string_view session_id,
                                                 const StoreCallOptions& options = {});
  absl::StatusOr<v1::ListVersionsResponse> ListVersions(absl::string_view session_id,
                                                        const StoreCallOptions& options = {});
  // Roll back: `version` becomes the head; expected_head_version 0 = unconditional.
  absl::StatusOr<v1::SessionInfo> SetHead(absl::string_view session_id, uint64_t version,
                                          uint64_t expected_head_version = 0,
                                          const StoreCallOptions& options = {});
  absl::StatusOr<v1::VersionInfo> PinVersion(absl::string_view session_id, uint64_t version,
                                             bool pinned, const StoreCallOptions& options = {});
  absl::StatusOr<v1::SessionInfo> Fork(absl::string_view source_session_id, uint64_t version,
                                       absl::string_view new_session_id,
                                       const StoreCallOptions& options = {});
  // Returns the number of versions deleted.
  absl::StatusOr<uint32_t> Delete(absl::string_view session_id,
                                  const StoreCallOptions& options = {});
  // One page of the caller's sessions (page_size 0 = 100).
  absl::StatusOr<v1::StoreListSessionsResponse> ListSessions(uint32_t page_size = 0,
                                                             absl::string_view page_token = "",
                                                             const StoreCallOptions& options = {});

  v1::MemoryStore::Stub* stub() { return stub_.get(); }

 private:
  void Prepare(grpc::ClientContext* context, const StoreCallOptions& options) const;

  std::unique_ptr<v1::MemoryStore::Stub> stub_;
  std::string authorization_;  // "Bearer <token>" or empty
};

}  // namespace kvfold::memory_svc

#endif  // KVFOLD_MEMORY_SVC_CLIENT_STORE_CLIENT_H_
