// The store's limits on transfers in flight: the transfer budget (in all and per tenant),
// the watchdog that cancels streams whose client stopped moving, and the limit on handler
// threads; through the real gRPC server on loopback, and the budget on its own.
#include <grpcpp/create_channel.h>

#include <chrono>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "memory_svc/service/transfer_budget.h"
#include "tests/common/prometheus_text.h"
#include "tests/memory_svc/server_fixture.h"

namespace kvfold::memory_svc::testing {
namespace {

using Code = absl::StatusCode;
constexpr uint64_t kMiB = 1 << 20;

TransferBudget::Limits SmallLimits() {
  TransferBudget::Limits limits;
  limits.total_bytes = 10;
  limits.tenant_bytes = 6;
  limits.max_wait = absl::Milliseconds(200);
  return limits;
}

TEST(TransferBudgetTest, LeasesFitTheTotalAndEachTenantsShare) {
  TransferBudget budget(SmallLimits());
  absl::StatusOr<TransferBudget::Lease> a1 = budget.Acquire("a", 4, absl::InfiniteFuture());
  ASSERT_TRUE(a1.ok()) << a1.status();
  // 4 + 3 > a's 6.
  const absl::Time start = absl::Now();
  absl::StatusOr<TransferBudget::Lease> a2 = budget.Acquire("a", 3, absl::InfiniteFuture());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(190));
  ASSERT_EQ(a2.status().code(), Code::kResourceExhausted);
  EXPECT_NE(a2.status().message().find("tenant 'a' (4 of 6 bytes in flight)"), std::string::npos)
      << a2.status();
  // b has its own share; the total (10) is what b and a share.
  absl::StatusOr<TransferBudget::Lease> b1 = budget.Acquire("b", 6, absl::InfiniteFuture());
  ASSERT_TRUE(b1.ok()) << b1.status();
  EXPECT_EQ(budget.leased_bytes(), 10u);
  absl::StatusOr<TransferBudget::Lease> c1 = budget.Acquire("c", 1, absl::Now());
  ASSERT_EQ(c1.status().code(), Code::kResourceExhausted);
  EXPECT_NE(c1.status().message().find("the transfer budget (10 of 10 bytes"), std::string::npos)
      << c1.status();
  EXPECT_EQ(budget.refusals(), 2u);
  b1->Release();
  EXPECT_EQ(budget.leased_bytes(), 4u);
  EXPECT_TRUE(budget.Acquire("c", 6, absl::Now()).ok());
  EXPECT_EQ(budget.leased_bytes(), 4u);  // that lease went with its temporary
}

TEST(TransferBudgetTest, AWaitingLeaseGetsTheBytesAnotherReturns) {
  TransferBudget::Limits limits = SmallLimits();
  limits.max_wait = absl::Seconds(10);
  TransferBudget budget(limits);
  absl::StatusOr<TransferBudget::Lease> held = budget.Acquire("a", 6, absl::InfiniteFuture());
  ASSERT_TRUE(held.ok());
  std::thread release([&] {
    absl::SleepFor(absl::Milliseconds(100));
    held->Release();
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<TransferBudget::Lease> next = budget.Acquire("a", 5, absl::InfiniteFuture());
  release.join();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(90));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // The call's deadline cuts the wait short of max_wait.
  const absl::Time cut = absl::Now();
  EXPECT_EQ(budget.Acquire("a", 5, absl::Now() + absl::Milliseconds(50)).status().code(),
            Code::kResourceExhausted);
  EXPECT_LT(absl::Now() - cut, absl::Seconds(5));
  // Moving a lease moves its bytes; destroying it returns them.
  TransferBudget::Lease moved = *std::move(next);
  EXPECT_EQ(moved.bytes(), 5u);
  EXPECT_EQ(budget.leased_bytes(), 5u);
  moved = TransferBudget::Lease();
  EXPECT_EQ(budget.leased_bytes(), 0u);
}

TEST(TransferBudgetTest, ALeaseLargerThanALimitWaitsForThatLimitToBeFree) {
  TransferBudget budget(SmallLimits());
  absl::StatusOr<TransferBudget::Lease> small = budget.Acquire("a", 1, absl::InfiniteFuture());
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(budget.Acquire("a", 8, absl::Now()).status().code(), Code::kResourceExhausted);
  small->Release();
  absl::StatusOr<TransferBudget::Lease> big = budget.Acquire("a", 8, absl::Now());
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(budget.leased_bytes(), 8u);
  EXPECT_EQ(budget.Acquire("b", 1, absl::Now()).status().code(), Code::kOk);
}

TEST(TransferBudgetTest, LimitsAreValidated) {
  TransferBudget::Limits limits = SmallLimits();
  EXPECT_TRUE(TransferBudget::Validate(limits).ok());
  limits.tenant_bytes = 11;
  EXPECT_EQ(TransferBudget::Validate(limits).code(), Code::kInvalidArgument);
  limits.tenant_bytes = 0;
  EXPECT_EQ(TransferBudget::Validate(limits).code(), Code::kInvalidArgument);
}

// A call as `token`'s tenant that gives up after 10 s: long after the watchdog should have
// ended it.
void Authorize(grpc::ClientContext* context, const std::string& token) {
  context->AddMetadata("authorization", "Bearer " + token);
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
}

// A PutBlock stream held open: the header and the first `sent` payload bytes of a block,
// then nothing.
struct StalledPut {
  StalledPut(v1::MemoryStore::Stub* stub, const std::string& token, const std::string& session,
             const TestBlock& block, size_t sent) {
    Authorize(&context, token);
    writer = stub->PutBlock(&context, &response);
    v1::PutBlockRequest m;
    m.set_session_id(session);
    *m.mutable_header() = block.header;
    m.set_data(block.payload.substr(0, sent));
    writer->Write(m);
  }
  grpc::ClientContext context;
  v1::PutBlockResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::PutBlockRequest>> writer;
};

// A value of the store's /metrics page, read with the strict exposition reader; NaN when
// absent.
double MetricValue(int port, const std::string& name,
                   const std::map<std::string, std::string>& labels = {}) {
  const kvfold::testing::PromPage page =
      kvfold::testing::ParsePrometheusText(kvfold::testing::HttpBody(HttpGet(port, "/metrics")));
  EXPECT_TRUE(page.errors.empty()) << page.errors.front();
  return page.Value(name, labels);
}

class TransferLimitTest : public ServerFixture {
 protected:
  void SetUp() override {
    config_.tokens_file = WriteFile("tokens", "tok-alice alice\ntok-bob bob\n");
    config_.metrics_port = -1;
    // Room for two of alice's 1 MiB blocks (each block is its payload plus its header's
    // few hundred bytes), and for one of bob's beside them.
    config_.transfers.total_bytes = 4 * kMiB;
    config_.transfers.tenant_bytes = 2 * kMiB + 4096;
    config_.transfers.max_wait = absl::Milliseconds(300);
    config_.stream_idle_timeout = absl::Milliseconds(400);
    StartServer();
    stub_ = v1::MemoryStore::NewStub(Channel());
  }
  // Polls the series until it equals `value` (5 s at most): a cancelled call's client can
  // see its end before the handler has returned and been counted.
  bool MetricBecomes(const std::string& name, double value,
                     const std::map<std::string, std::string>& labels = {}) {
    for (int i = 0; i < 100; ++i) {
      if (MetricValue(server_->metrics_port(), name, labels) == value) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }
  std::unique_ptr<v1::MemoryStore::Stub> stub_;
};

TEST_F(TransferLimitTest, StalledPutsHoldOnlyTheirTenantsShareUntilTheWatchdogEndsThem) {
  const TestBlock block = MakeBlock(1, 128, 4096);  // 1 MiB of fp16
  ASSERT_EQ(block.payload.size(), kMiB);
  auto first = std::make_unique<StalledPut>(stub_.get(), "tok-alice", "a1", block, 256 << 10);
  auto second = std::make_unique<StalledPut>(stub_.get(), "tok-alice", "a2", block, 256 << 10);
  ASSERT_TRUE(MetricBecomes("kvfold_memory_transfer_bytes",
                            2.0 * block.header.ByteSizeLong() + 2.0 * kMiB));
  // A third of alice's blocks does not fit her share: refused after the wait, unread.
  StoreClient alice = Client("tok-alice"), bob = Client("tok-bob");
  const absl::Time start = absl::Now();
  absl::Status third = alice.Put("a3", 0, block.header, block.payload).status();
  EXPECT_EQ(third.code(), Code::kResourceExhausted) << third;
  EXPECT_NE(third.message().find("tenant 'alice'"), std::string::npos) << third;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
  // Bob's share is his own.
  ASSERT_TRUE(bob.Put("b1", 0, block.header, block.payload).ok());
  ASSERT_TRUE(bob.Get("b1").ok());
  // The watchdog ends the stalled streams; nothing of theirs is committed and the bytes
  // return to the budget.
  EXPECT_FALSE(first->writer->Finish().ok());
  EXPECT_FALSE(second->writer->Finish().ok());
  const int port = server_->metrics_port();
  EXPECT_EQ(MetricValue(port, "kvfold_memory_idle_streams_cancelled_total"), 2);
  EXPECT_TRUE(MetricBecomes("kvfold_memory_transfer_bytes", 0));
  EXPECT_TRUE(MetricBecomes("kvfold_memory_requests_total", 2,
                            {{"method", "PutBlock"}, {"code", "DEADLINE_EXCEEDED"}}));
  EXPECT_EQ(MetricValue(port, "kvfold_memory_transfer_refusals_total"), 1);
  EXPECT_EQ(alice.GetSessionInfo("a1").status().code(), Code::kNotFound);
  EXPECT_EQ(alice.GetSessionInfo("a2").status().code(), Code::kNotFound);
  ASSERT_TRUE(alice.Put("a3", 0, block.header, block.payload).ok());
}

TEST_F(TransferLimitTest, AStreamThatNeverSendsItsHeaderIsCancelled) {
  grpc::ClientContext context;
  Authorize(&context, "tok-alice");
  v1::PutBlockResponse response;
  auto writer = stub_->PutBlock(&context, &response);
  const absl::Time start = absl::Now();
  const grpc::Status status = writer->Finish();  // waits for the server to end the call
  EXPECT_FALSE(status.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(MetricValue(server_->metrics_port(), "kvfold_memory_idle_streams_cancelled_total"), 1);
}

TEST_F(TransferLimitTest, AMovingStreamIsNeverCancelled) {
  // A slow client that keeps sending: each chunk comes well within the idle time, the
  // whole stream takes longer than it.
  const TestBlock block = MakeBlock(2, 128, 4096);
  grpc::ClientContext context;
  Authorize(&context, "tok-alice");
  v1::PutBlockResponse response;
  auto writer = stub_->PutBlock(&context, &response);
  const size_t chunk = 128 << 10;
  for (size_t offset = 0; offset < block.payload.size(); offset += chunk) {
    v1::PutBlockRequest m;
    if (offset == 0) {
      m.set_session_id("slow");
      *m.mutable_header() = block.header;
    }
    m.set_offset(offset);
    m.set_data(block.payload.substr(offset, chunk));
    ASSERT_TRUE(writer->Write(m));
    absl::SleepFor(absl::Milliseconds(100));
  }
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.version(), 1u);
  EXPECT_EQ(MetricValue(server_->metrics_port(), "kvfold_memory_idle_streams_cancelled_total"), 0);
}

class GetBlockStallTest : public TransferLimitTest {
 protected:
  void SetUp() override {
    config_.tokens_file = WriteFile("tokens", "tok-alice alice\n");
    config_.metrics_port = -1;
    config_.stream_idle_timeout = absl::Milliseconds(400);
    StartServer();
    stub_ = v1::MemoryStore::NewStub(Channel());
  }
};

TEST_F(GetBlockStallTest, AReaderThatStopsReadingIsCancelledAndItsLeaseReturned) {
  // More than the flow-control windows hold, so the server's writes wait for the reader.
  const TestBlock block = MakeBlock(3, 4096, 4096);  // 32 MiB
  StoreClient alice = Client("tok-alice");
  ASSERT_TRUE(alice.Put("big", 0, block.header, block.payload).ok());
  grpc::ClientContext context;
  Authorize(&context, "tok-alice");
  v1::GetBlockRequest request;
  request.set_session_id("big");
  auto reader = stub_->GetBlock(&context, request);
  v1::GetBlockResponse message;
  ASSERT_TRUE(reader->Read(&message));
  EXPECT_TRUE(message.has_header());
  EXPECT_GT(MetricValue(server_->metrics_port(), "kvfold_memory_transfer_bytes"), 32.0 * kMiB);
  // The client reads nothing more; the watchdog cancels the call.
  EXPECT_TRUE(MetricBecomes("kvfold_memory_idle_streams_cancelled_total", 1));
  EXPECT_TRUE(MetricBecomes("kvfold_memory_transfer_bytes", 0));
  EXPECT_TRUE(MetricBecomes("kvfold_memory_requests_total", 1,
                            {{"method", "GetBlock"}, {"code", "DEADLINE_EXCEEDED"}}));
  context.TryCancel();
  reader->Finish();
  // A reader that reads gets the block.
  absl::StatusOr<StoreBlock> got = alice.Get("big");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->payload, block.payload);
}

class ThreadLimitTest : public ServerFixture {
 protected:
  void SetUp() override {
    config_.max_call_threads = 4;
    config_.stream_idle_timeout = absl::Milliseconds(500);
    StartServer();
  }
};

TEST_F(ThreadLimitTest, CallsBeyondTheThreadLimitAreRefusedAtOnceAndServedAfter) {
  auto stub = v1::MemoryStore::NewStub(Channel());
  // Streams that hold a handler thread each until the watchdog ends them.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientWriter<v1::PutBlockRequest>>> writers;
  v1::PutBlockResponse response;
  for (int i = 0; i < 8; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    writers.push_back(stub->PutBlock(contexts.back().get(), &response));
  }
  StoreClient client = Client();
  const absl::Time start = absl::Now();
  absl::Status refused = client.GetSessionInfo("s").status();
  // Refused at once: a call that waited for a thread would be served once the watchdog
  // freed one.
  EXPECT_EQ(refused.code(), Code::kResourceExhausted) << refused;
  // The watchdog ends the silent streams, long before their own deadlines.
  for (auto& writer : writers) writer->Finish();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  const TestBlock block = MakeBlock(4);
  absl::Status put;
  for (int attempt = 0; attempt < 50; ++attempt) {
    put = client.Put("s", 0, block.header, block.payload).status();
    if (put.ok()) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(put.ok()) << put;
}

}  // namespace
}  // namespace kvfold::memory_svc::testing
