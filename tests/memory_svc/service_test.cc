// MemoryStore through the real gRPC server on loopback: round trips, every bad input,
// abandoned streams, health and metrics.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "tests/memory_svc/server_fixture.h"

namespace kvfold::memory_svc::testing {
namespace {

using Code = absl::StatusCode;

// Sends `messages` as one PutBlock stream exactly as given.
absl::Status PutRaw(v1::MemoryStore::Stub* stub, const std::vector<v1::PutBlockRequest>& messages,
                    v1::PutBlockResponse* response = nullptr) {
  grpc::ClientContext context;
  v1::PutBlockResponse ignored;
  auto writer = stub->PutBlock(&context, response ? response : &ignored);
  for (const v1::PutBlockRequest& m : messages) {
    if (!writer->Write(m)) break;
  }
  writer->WritesDone();
  return FromGrpcStatus(writer->Finish());
}

// The messages a well-behaved client sends for `block` in chunks of `chunk` bytes.
std::vector<v1::PutBlockRequest> Chunks(const std::string& session, uint64_t expected,
                                        const TestBlock& block, size_t chunk) {
  std::vector<v1::PutBlockRequest> out;
  size_t offset = 0;
  do {
    v1::PutBlockRequest m;
    if (offset == 0) {
      m.set_session_id(session);
      m.set_expected_head_version(expected);
      *m.mutable_header() = block.header;
    }
    const size_t n = std::min(chunk, block.payload.size() - offset);
    m.set_offset(offset);
    m.set_data(block.payload.substr(offset, n));
    out.push_back(std::move(m));
    offset += n;
  } while (offset < block.payload.size());
  return out;
}

class ServiceTest : public ServerFixture {};

TEST_F(ServiceTest, RoundTripsWithOddChunkSizes) {
  StoreClient client = Client();
  const TestBlock small = MakeBlock(1), llama = MakeBlock(2, 96, 4096),
                  big = MakeBlock(3, 96, 4096, v1::DTYPE_FP32);
  StorePutOptions odd;
  odd.chunk_bytes = 7777;
  absl::StatusOr<v1::PutBlockResponse> put = client.Put("s", 0, small.header, small.payload, odd);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->version(), 1u);
  EXPECT_EQ(put->checksum(), small.header.checksum());
  StorePutOptions max;
  max.chunk_bytes = 1 << 20;
  ASSERT_TRUE(client.Put("s", 1, llama.header, llama.payload, max).ok());
  ASSERT_TRUE(client.Put("s", 2, big.header, big.payload).ok());
  for (uint32_t chunk : {0u, 1000u, 1u << 20, 5u << 20}) {
    absl::StatusOr<StoreBlock> got = client.Get("s", 3, {}, chunk);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->payload, big.payload);
    EXPECT_EQ(got->info.version(), 3u);
    EXPECT_TRUE(got->info.is_head());
  }
  absl::StatusOr<StoreBlock> first = client.Get("s", 1);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->payload, small.payload);
  EXPECT_EQ(first->header.SerializeAsString(), small.header.SerializeAsString());
  // Server-side chunking: the 1.5 MiB block arrives in ceil(1.5 MiB / 1000 B) messages.
  grpc::ClientContext context;
  v1::GetBlockRequest request;
  request.set_session_id("s");
  request.set_chunk_size(100000);
  auto reader = client.stub()->GetBlock(&context, request);
  v1::GetBlockResponse message;
  int messages = 0;
  while (reader->Read(&message)) {
    EXPECT_EQ(message.has_header(), messages == 0);
    ++messages;
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(messages, (96 * 4096 * 4 + 99999) / 100000);
}

TEST_F(ServiceTest, EmptyPayloadBlocksRoundTrip) {
  // Full/sliding/sink sessions and memory sessions before their first fold have
  // mem_slots = 0 and no payload: one message each way.
  StoreClient client = Client();
  v1::MemoryBlockHeader header;
  header.set_format_version(1);
  header.set_hidden_size(64);
  header.set_dtype(v1::DTYPE_FP16);  // as the replicas write it (docs/contracts.md)
  header.set_kv_mode(v1::KV_MODE_SLIDING);
  header.set_window_size(64);
  for (int i = 0; i < 61; ++i) header.add_window_token_ids(i * 3);
  header.set_total_tokens(61);
  SealBlockHeader(&header, "");
  absl::StatusOr<v1::PutBlockResponse> put = client.Put("empty", 0, header, "");
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->payload_size(), 0u);
  absl::StatusOr<StoreBlock> got = client.Get("empty");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->payload.empty());
  EXPECT_EQ(got->header.window_token_ids_size(), 61);
  EXPECT_EQ(got->info.total_tokens(), 61u);
  ASSERT_TRUE(client.Fork("empty", 0, "empty-fork").ok());
  EXPECT_EQ(client.Get("empty-fork")->header.SerializeAsString(), header.SerializeAsString());
}

TEST_F(ServiceTest, HeaderOfALongFullModeSessionFits) {
  // A full-mode session keeps its whole history in window_token_ids: ~4.5 MB of header for
  // 1.5M ids, more than gRPC's default 4 MiB message limit.
  TestBlock b = MakeBlock(21);
  for (int i = 0; i < 1'500'000; ++i) b.header.add_window_token_ids(100000 + i % 28000);
  b.header.set_checksum(BlockChecksum(b.header, b.payload));
  ASSERT_GT(b.header.ByteSizeLong(), 4u << 20);
  StoreClient client(CreateStoreChannel(server_->address(), grpc::InsecureChannelCredentials()));
  absl::StatusOr<v1::PutBlockResponse> put = client.Put("long", 0, b.header, b.payload);
  ASSERT_TRUE(put.ok()) << put.status();
  absl::StatusOr<StoreBlock> got = client.Get("long");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->header.SerializeAsString(), b.header.SerializeAsString());
  EXPECT_EQ(got->payload, b.payload);
}

TEST_F(ServiceTest, EveryBadPutIsRejectedAndCommitsNothing) {
  auto stub = v1::MemoryStore::NewStub(Channel());
  const TestBlock b = MakeBlock(5, 31, 100);  // 6200 bytes
  auto chunks = [&](size_t n) { return Chunks("s", 0, b, n); };

  EXPECT_EQ(PutRaw(stub.get(), {}).code(), Code::kInvalidArgument);  // empty stream
  auto no_header = chunks(1000);
  no_header[0].clear_header();
  EXPECT_EQ(PutRaw(stub.get(), no_header).code(), Code::kInvalidArgument);
  auto out_of_order = chunks(1000);
  std::swap(out_of_order[1], out_of_order[2]);
  *out_of_order[2].mutable_header() = b.header;
  out_of_order[1].clear_header();
  absl::Status s = PutRaw(stub.get(), out_of_order);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("out of order"), std::string::npos) << s;
  auto gap = chunks(1000);
  gap.erase(gap.begin() + 2);
  EXPECT_EQ(PutRaw(stub.get(), gap).code(), Code::kInvalidArgument);
  auto second_header = chunks(1000);
  *second_header[3].mutable_header() = b.header;
  EXPECT_EQ(PutRaw(stub.get(), second_header).code(), Code::kInvalidArgument);
  auto truncated = chunks(1000);
  truncated.pop_back();
  s = PutRaw(stub.get(), truncated);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("nothing committed"), std::string::npos) << s;
  auto too_long = chunks(1000);
  v1::PutBlockRequest extra;
  extra.set_offset(b.payload.size());
  extra.set_data("xyz");
  too_long.push_back(extra);
  EXPECT_EQ(PutRaw(stub.get(), too_long).code(), Code::kInvalidArgument);
  auto size_lie = chunks(1000);
  size_lie[0].mutable_header()->set_hidden_size(101);  // 31*101*2 != payload_size
  EXPECT_EQ(PutRaw(stub.get(), size_lie).code(), Code::kInvalidArgument);
  auto bad_sum = chunks(1000);
  bad_sum[0].mutable_header()->set_checksum(b.header.checksum() + 1);
  EXPECT_EQ(PutRaw(stub.get(), bad_sum).code(), Code::kDataLoss);
  auto flipped = chunks(1000);
  (*flipped[4].mutable_data())[17] ^= 1;
  s = PutRaw(stub.get(), flipped);
  EXPECT_EQ(s.code(), Code::kDataLoss);
  auto huge = chunks(1000);  // a header announcing 256 MiB > the 64 MiB limit
  huge[0].mutable_header()->set_mem_slots(16384);
  huge[0].mutable_header()->set_hidden_size(4096);
  huge[0].mutable_header()->set_dtype(v1::DTYPE_FP32);
  huge[0].mutable_header()->set_payload_size(256ull << 20);
  s = PutRaw(stub.get(), huge);
  EXPECT_EQ(s.code(), Code::kResourceExhausted) << s;
  const TestBlock two_mib = MakeBlock(7, 256, 4096);
  EXPECT_EQ(PutRaw(stub.get(), Chunks("s", 0, two_mib, 2 << 20)).code(),
            Code::kInvalidArgument);  // one 2 MiB chunk > 1 MiB
  // Session ids follow the replicas' rule (core/session_id.h): a space is refused too.
  for (const std::string& id : {std::string(), std::string(257, 'a'), std::string("a\tb"),
                                std::string("a b"), std::string("\x01"),
                                std::string("caf\xc3\xa9")}) {
    EXPECT_EQ(PutRaw(stub.get(), Chunks(id, 0, b, 4096)).code(), Code::kInvalidArgument) << id;
  }
  auto negative = chunks(4096);
  negative[0].set_expected_head_version(static_cast<uint64_t>(-3));
  EXPECT_EQ(PutRaw(stub.get(), negative).code(), Code::kInvalidArgument);
  auto int8_payload = chunks(4096);  // the payload is FP16 or FP32 only
  int8_payload[0].mutable_header()->set_dtype(v1::DTYPE_INT8);
  int8_payload[0].mutable_header()->set_payload_size(31 * 100);
  EXPECT_EQ(PutRaw(stub.get(), int8_payload).code(), Code::kInvalidArgument);
  auto bad_format = chunks(4096);
  bad_format[0].mutable_header()->set_format_version(0);
  EXPECT_EQ(PutRaw(stub.get(), bad_format).code(), Code::kInvalidArgument);

  StoreClient client(Channel());
  EXPECT_EQ(client.GetSessionInfo("s").status().code(), Code::kNotFound);  // nothing committed
  EXPECT_EQ(client.ListSessions()->sessions_size(), 0);
  // And the well-formed stream still works afterwards.
  v1::PutBlockResponse response;
  ASSERT_TRUE(PutRaw(stub.get(), chunks(999), &response).ok());
  EXPECT_EQ(response.version(), 1u);
}

TEST_F(ServiceTest, BadReadsAndAdminCalls) {
  StoreClient client = Client();
  const TestBlock b = MakeBlock(1);
  ASSERT_TRUE(client.Put("s", 0, b.header, b.payload).ok());
  EXPECT_EQ(client.Get("s", 2).status().code(), Code::kNotFound);
  EXPECT_EQ(client.Get("nope").status().code(), Code::kNotFound);
  EXPECT_EQ(client.Get("s", static_cast<uint64_t>(-1)).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(client.Get("").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(client.Get(std::string(257, 'x')).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(client.GetSessionInfo("bad\nid").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(client.ListVersions("nope").status().code(), Code::kNotFound);
  EXPECT_EQ(client.SetHead("s", 5).status().code(), Code::kNotFound);
  EXPECT_EQ(client.SetHead("s", 0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(client.SetHead("s", static_cast<uint64_t>(-2)).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(client.PinVersion("s", 9, true).status().code(), Code::kNotFound);
  EXPECT_EQ(client.Fork("s", 0, "s").status().code(), Code::kAlreadyExists);
  EXPECT_EQ(client.Fork("s", 0, "").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(client.Delete("nope").status().code(), Code::kNotFound);
  EXPECT_EQ(client.ListSessions(1001).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(client.ListSessions(10, "bad\x01token").status().code(), Code::kInvalidArgument);
  StorePutOptions zero_chunk;
  zero_chunk.chunk_bytes = 0;
  EXPECT_EQ(client.Put("s", 1, b.header, b.payload, zero_chunk).status().code(),
            Code::kInvalidArgument);
}

TEST_F(ServiceTest, AbandonedStreamCommitsNothing) {
  auto stub = v1::MemoryStore::NewStub(Channel());
  const TestBlock b = MakeBlock(8, 96, 4096);
  auto messages = Chunks("abandoned", 0, b, 64 << 10);
  {
    grpc::ClientContext context;
    v1::PutBlockResponse response;
    auto writer = stub->PutBlock(&context, &response);
    for (size_t i = 0; i < messages.size() / 2; ++i) ASSERT_TRUE(writer->Write(messages[i]));
    context.TryCancel();  // the client goes away half-way
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  {
    // All bytes sent, but cancelled before the half-close: still nothing.
    grpc::ClientContext context;
    v1::PutBlockResponse response;
    auto writer = stub->PutBlock(&context, &response);
    for (const auto& m : messages) ASSERT_TRUE(writer->Write(m));
    context.TryCancel();
    writer->Finish().IgnoreError();
  }
  StoreClient client = Client();
  absl::SleepFor(absl::Milliseconds(200));  // let the server notice the cancellations
  EXPECT_EQ(client.GetSessionInfo("abandoned").status().code(), Code::kNotFound);
  ASSERT_TRUE(client.Put("abandoned", 0, b.header, b.payload).ok());
  EXPECT_EQ(client.GetSessionInfo("abandoned")->latest_version(), 1u);
}

TEST_F(ServiceTest, RollbackAndForkThroughTheService) {
  StoreClient client = Client();
  for (uint64_t v = 1; v <= 4; ++v) {
    const TestBlock b = MakeBlock(v);
    ASSERT_TRUE(client.Put("main", v - 1, b.header, b.payload).ok());
  }
  absl::StatusOr<v1::SessionInfo> rolled = client.SetHead("main", 2, 4);
  ASSERT_TRUE(rolled.ok()) << rolled.status();
  EXPECT_EQ(rolled->head_version(), 2u);
  EXPECT_EQ(client.Get("main")->payload, MakeBlock(2).payload);
  absl::Status lost = client.Put("main", 4, MakeBlock(9).header, MakeBlock(9).payload).status();
  EXPECT_EQ(lost.code(), Code::kAborted);
  EXPECT_NE(lost.message().find("head is 2"), std::string::npos) << lost;
  ASSERT_TRUE(client.Put("main", 2, MakeBlock(5).header, MakeBlock(5).payload).ok());
  absl::StatusOr<v1::ListVersionsResponse> versions = client.ListVersions("main");
  ASSERT_TRUE(versions.ok());
  ASSERT_EQ(versions->versions_size(), 5);
  EXPECT_EQ(versions->versions(0).version(), 5u);
  EXPECT_TRUE(versions->versions(0).is_head());
  EXPECT_EQ(versions->session().latest_version(), 5u);

  absl::StatusOr<v1::SessionInfo> fork = client.Fork("main", 3, "branch");
  ASSERT_TRUE(fork.ok()) << fork.status();
  EXPECT_EQ(fork->head_version(), 1u);
  absl::StatusOr<StoreBlock> branch = client.Get("branch");
  ASSERT_TRUE(branch.ok());
  EXPECT_EQ(branch->payload, MakeBlock(3).payload);
  EXPECT_EQ(branch->header.total_tokens(), MakeBlock(3).header.total_tokens());
  EXPECT_EQ(client.Fork("main", 0, "branch").status().code(), Code::kAlreadyExists);
  absl::StatusOr<v1::VersionInfo> pin = client.PinVersion("main", 1, true);
  ASSERT_TRUE(pin.ok());
  EXPECT_TRUE(pin->pinned());
  absl::StatusOr<uint32_t> deleted = client.Delete("main");
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(*deleted, 5u);
  EXPECT_EQ(client.Get("main", 3).status().code(), Code::kNotFound);
  EXPECT_EQ(client.Get("branch")->payload, MakeBlock(3).payload);  // forks are independent
}

TEST_F(ServiceTest, ListSessionsPages) {
  StoreClient client = Client();
  for (int i = 0; i < 23; ++i) {
    const TestBlock b = MakeBlock(i);
    ASSERT_TRUE(client.Put(absl::StrCat("sess-", 100 + i), 0, b.header, b.payload).ok());
  }
  std::vector<std::string> ids;
  std::string token;
  do {
    absl::StatusOr<v1::StoreListSessionsResponse> page = client.ListSessions(10, token);
    ASSERT_TRUE(page.ok()) << page.status();
    for (const auto& s : page->sessions()) ids.push_back(s.session_id());
    token = page->next_page_token();
  } while (!token.empty());
  ASSERT_EQ(ids.size(), 23u);
  EXPECT_EQ(ids.front(), "sess-100");
  EXPECT_EQ(ids.back(), "sess-122");
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  EXPECT_EQ(client.ListSessions()->sessions_size(), 23);  // page_size 0 = 100
}

TEST_F(ServiceTest, DrainLetsInFlightPutsFinish) {
  auto stub = v1::MemoryStore::NewStub(Channel());
  const TestBlock b = MakeBlock(12, 96, 4096);
  auto messages = Chunks("drain", 0, b, 64 << 10);
  grpc::ClientContext context;
  v1::PutBlockResponse response;
  auto writer = stub->PutBlock(&context, &response);
  for (size_t i = 0; i < messages.size() / 2; ++i) ASSERT_TRUE(writer->Write(messages[i]));
  // The put must be in the server's hands before draining starts (on a loaded machine the
  // handler can start well after the client's first writes).
  for (int i = 0; i < 400 && server_->calls_in_flight() == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(server_->calls_in_flight(), 1);
  absl::Status shutdown;
  std::thread stopper([&] { shutdown = server_->Shutdown(absl::Seconds(10)); });
  // Once draining, new calls are refused while the put stays in flight.
  StoreClient late = Client();
  absl::StatusCode late_code = Code::kOk;
  for (int i = 0; i < 200 && late_code != Code::kUnavailable; ++i) {
    late_code = late.GetSessionInfo("drain").status().code();
    if (late_code != Code::kUnavailable) absl::SleepFor(absl::Milliseconds(25));
  }
  EXPECT_EQ(late_code, Code::kUnavailable);
  for (size_t i = messages.size() / 2; i < messages.size(); ++i) {
    ASSERT_TRUE(writer->Write(messages[i]));
  }
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  stopper.join();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.version(), 1u);
  EXPECT_TRUE(shutdown.ok()) << shutdown;
  // The drained put is durable: reopen the DB and read it.
  server_.reset();
  StartServer();
  absl::StatusOr<StoreBlock> got = Client().Get("drain");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->payload, b.payload);
}

// Bytes that are no protobuf, and a session id that is not UTF-8 (proto3 strings must be),
// fail in gRPC before any handler runs: the answer is INVALID_ARGUMENT with a message, not
// INTERNAL with none, and the server keeps serving.
TEST_F(ServiceTest, UndecodableRequestsAreInvalidArgument) {
  auto channel = Channel();
  const std::string garbage("\xff\xff\xff\xff\x0f", 5);
  const std::string bad_utf8("\x0a\x02\xc3\x28", 4);  // field 1 (session_id) = C3 28
  for (const std::string method : {"GetSessionInfo", "ListVersions", "DeleteSession"}) {
    for (const std::string& bytes : {garbage, bad_utf8}) {
      const grpc::Status s = RawUnaryCall(channel.get(), "/kvfold.v1.MemoryStore/" + method, bytes);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
      EXPECT_NE(s.error_message().find("not a valid message"), std::string::npos)
          << method << ": " << s.error_message();
    }
  }
  // A server-streaming method: GetBlock with a non-UTF-8 id.
  {
    grpc::Slice slice(bad_utf8);
    grpc::ByteBuffer in(&slice, 1), out;
    grpc::ClientContext context;
    auto reader = std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>>(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
            channel.get(),
            grpc::internal::RpcMethod("/kvfold.v1.MemoryStore/GetBlock",
                                      grpc::internal::RpcMethod::SERVER_STREAMING),
            &context, in));
    while (reader->Read(&out)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  // Still serving, and a handler's own codes are untouched.
  StoreClient client = Client();
  EXPECT_EQ(client.GetSessionInfo("absent").status().code(), Code::kNotFound);
  const TestBlock b = MakeBlock(9);
  EXPECT_TRUE(client.Put("after-garbage", 0, b.header, b.payload).ok());
}

// gRPC enables SO_REUSEPORT by default; a second store on a port in use would take part of
// the traffic to another database. It must refuse to start instead.
TEST_F(ServiceTest, ASecondServerOnAPortInUseRefusesToStart) {
  TempDir other;
  ServerConfig config;
  config.listen = server_->address();
  config.store.db_dir = other.path() + "/db";
  config.insecure_no_auth = true;
  absl::StatusOr<std::unique_ptr<MemoryServer>> second = MemoryServer::Start(config);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kUnavailable);
  EXPECT_NE(second.status().message().find("in use"), absl::string_view::npos) << second.status();
  // The first one still answers every call.
  EXPECT_EQ(Client().GetSessionInfo("x").status().code(), Code::kNotFound);
}

TEST(SecureByDefaultTest, NoTokensFileAndNoInsecureFlagRefusesToStart) {
  TempDir dir;
  ServerConfig config;
  config.listen = "127.0.0.1:0";
  config.store.db_dir = dir.path() + "/db";
  absl::StatusOr<std::unique_ptr<MemoryServer>> server = MemoryServer::Start(config);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(server.status().message().find("--insecure-no-auth"), absl::string_view::npos)
      << server.status();
  config.insecure_no_auth = true;
  server = MemoryServer::Start(config);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE((*server)->Shutdown(absl::Seconds(1)).ok());
}

TEST_F(ServiceTest, HealthServingUntilShutdown) {
  auto channel = Channel();
  EXPECT_EQ(HealthStatus(channel.get(), ""), 1);  // SERVING
  EXPECT_EQ(HealthStatus(channel.get(), "kvfold.v1.MemoryStore"), 1);
  ASSERT_TRUE(server_->Shutdown(absl::Seconds(1)).ok());
  EXPECT_NE(HealthStatus(channel.get(), ""), 1);
  server_.reset();
}

TEST_F(ServiceTest, ReflectionListsTheService) {
  // grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo with list_services = ""
  // (field 7), through the byte-buffer path: what `grpcurl list` sends.
  auto channel = Channel();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          channel.get(),
          grpc::internal::RpcMethod(
              "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
              grpc::internal::RpcMethod::BIDI_STREAMING),
          &context));
  const std::string request("\x3a\x00", 2);
  grpc::Slice slice(request);
  grpc::ByteBuffer in(&slice, 1), out;
  ASSERT_TRUE(stream->Write(in));
  stream->WritesDone();
  ASSERT_TRUE(stream->Read(&out));
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(out.Dump(&slices).ok());
  std::string reply;
  for (const grpc::Slice& s : slices) {
    reply.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  EXPECT_NE(reply.find("kvfold.v1.MemoryStore"), std::string::npos);
  EXPECT_NE(reply.find("grpc.health.v1.Health"), std::string::npos);
  while (stream->Read(&out)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
}

class MetricsTest : public ServerFixture {
 protected:
  void SetUp() override {
    config_.metrics_port = -1;  // any free port
    StartServer();
  }
};

TEST_F(MetricsTest, PrometheusCounters) {
  StoreClient client = Client();
  const TestBlock b = MakeBlock(1, 96, 4096);
  ASSERT_TRUE(client.Put("m", 0, b.header, b.payload).ok());
  ASSERT_TRUE(client.Put("m", 1, b.header, b.payload).ok());
  EXPECT_EQ(client.Put("m", 1, b.header, b.payload).status().code(), Code::kAborted);
  ASSERT_TRUE(client.Get("m").ok());
  const std::string text = HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_NE(text.find("200 OK"), std::string::npos) << text;
  EXPECT_NE(text.find("kvfold_memory_requests_total{method=\"PutBlock\",code=\"OK\"} 2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("kvfold_memory_requests_total{method=\"PutBlock\",code=\"ABORTED\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("kvfold_memory_cas_aborts_total 1"), std::string::npos);
  EXPECT_NE(text.find("kvfold_memory_payload_bytes_written_total 1572864"), std::string::npos);
  EXPECT_NE(text.find("kvfold_memory_payload_bytes_read_total 786432"), std::string::npos);
  EXPECT_NE(text.find("kvfold_memory_request_seconds_count{method=\"PutBlock\"} 3"),
            std::string::npos);
  EXPECT_NE(text.find("kvfold_memory_request_seconds_bucket{method=\"GetBlock\",le=\"+Inf\"} 1"),
            std::string::npos);
  EXPECT_NE(HttpGet(server_->metrics_port(), "/other").find("404"), std::string::npos);
  // The same port answers the probes: ready while serving, live while the process is.
  EXPECT_NE(HttpGet(server_->metrics_port(), "/readyz").find("200 OK"), std::string::npos);
  EXPECT_NE(HttpGet(server_->metrics_port(), "/livez").find("200 OK"), std::string::npos);
}

class RetentionServiceTest : public ServerFixture {
 protected:
  void SetUp() override {
    config_.store.versions_kept = 2;
    config_.store.idle_ttl_seconds = 60;
    config_.store.sweep_interval_ms = 3'600'000;
    config_.store.clock_ms = [this] { return now_ms_.load(); };
    StartServer();
  }
  std::atomic<int64_t> now_ms_{1'000'000};
};

TEST_F(RetentionServiceTest, RetentionAndTtlThroughTheService) {
  StoreClient client = Client();
  for (uint64_t v = 1; v <= 5; ++v) {
    const TestBlock b = MakeBlock(v);
    StorePutOptions options;
    options.pin = v == 1;
    ASSERT_TRUE(client.Put("r", v - 1, b.header, b.payload, options).ok());
  }
  absl::StatusOr<v1::ListVersionsResponse> list = client.ListVersions("r");
  ASSERT_TRUE(list.ok());
  std::vector<uint64_t> kept;
  for (const auto& v : list->versions()) kept.push_back(v.version());
  EXPECT_EQ(kept, (std::vector<uint64_t>{5, 4, 1}));
  EXPECT_EQ(client.Get("r", 3).status().code(), Code::kNotFound);
  EXPECT_EQ(client.Get("r", 1)->payload, MakeBlock(1).payload);
  now_ms_ += 61'000;
  EXPECT_EQ(client.GetSessionInfo("r").status().code(), Code::kNotFound);
  EXPECT_EQ(client.ListSessions()->sessions_size(), 0);
  EXPECT_EQ(*server_->store()->SweepExpiredSessions(), 1);
}

}  // namespace
}  // namespace kvfold::memory_svc::testing
