// Session::ObservePrefillRows, in every KV mode and KV element type: the rows a prompt hands the
// observer are the logits the same tokens give fed one at a time (bit for bit), one per token, in
// order, through evictions and folds; whole and in pieces; observing changes nothing the session
// keeps; ImportState and decode steps are never observed.
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "inference_svc/engine/session.h"
#include "inference_svc/memory/memory_session.h"
#include "tests/testing/tiny_engine.h"

namespace kvfold::memory {
namespace {

using core::KvMode;
using Rows = std::vector<std::vector<float>>;

// Mode, whether the prompt goes in pieces (StartPrefill / ContinuePrefill), and the KV
// cache's element type.
struct Case {
  KvMode mode;
  bool pieces;
  core::DType kv_dtype = core::DType::kF32;
};

class ObservedPrefillTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    rig_ = testing::MakeTinyEngine(
        11, {.max_batch_tokens = 64, .kv_pool_bytes = 64 << 20, .kv_dtype = GetParam().kv_dtype});
    // Window 16 + chunk 8: a 150-token prompt folds many times.
    projector_ = testing::RandomTinyProjector(testing::TinyProjectorConfig(*rig_->engine, 4, 16, 8),
                                              5, "observed-prefill");
  }

  std::unique_ptr<engine::Session> NewSession() {
    const KvMode mode = GetParam().mode;
    if (core::IsMemoryMode(mode)) {
      auto s = MemorySession::Create(rig_->engine.get(), projector_.get(), {.mode = mode});
      EXPECT_TRUE(s.ok()) << s.status();
      return s.ok() ? std::unique_ptr<engine::Session>(std::move(*s)) : nullptr;
    }
    auto s = engine::CreatePlainSession(rig_->engine.get(),
                                        {.mode = mode, .window_size = 20, .sink_tokens = 4});
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

  // Feeds `ids` whole or in small pieces.
  absl::Status Feed(engine::Session& s, std::span<const int32_t> ids) {
    if (!GetParam().pieces) return s.Prefill(ids);
    if (absl::Status st = s.StartPrefill(ids); !st.ok()) return st;
    for (;;) {
      absl::StatusOr<bool> done = s.ContinuePrefill(/*budget_ms=*/0.01);
      if (!done.ok()) return done.status();
      if (*done) return absl::OkStatus();
    }
  }

  std::unique_ptr<testing::Rig> rig_;
  std::unique_ptr<Projector> projector_;
};

bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void ExpectSameState(const engine::SessionState& a, const engine::SessionState& b) {
  EXPECT_EQ(a.total_tokens, b.total_tokens);
  EXPECT_EQ(a.tokens_folded, b.tokens_folded);
  EXPECT_EQ(a.window_token_ids, b.window_token_ids);
  EXPECT_EQ(a.sink_token_ids, b.sink_token_ids);
  EXPECT_TRUE(SameBits(a.memory, b.memory));
}

TEST_P(ObservedPrefillTest, RowsAreTheOneAtATimeLogits) {
  const int vocab = rig_->engine->config().vocab_size;
  const auto history = testing::RandomIds(7, vocab, 1);
  const auto prompt = testing::RandomIds(150, vocab, 2);

  // The reference: every token appended on its own.
  auto one = NewSession();
  ASSERT_NE(one, nullptr);
  ASSERT_TRUE(one->Prefill(history).ok());
  Rows want;
  for (int32_t id : prompt) {
    ASSERT_TRUE(one->Append(id).ok());
    want.emplace_back(one->Logits().begin(), one->Logits().end());
  }

  // Observed: the history unobserved, then the prompt.
  auto observed = NewSession();
  ASSERT_NE(observed, nullptr);
  ASSERT_TRUE(observed->Prefill(history).ok());
  Rows got;
  observed->ObservePrefillRows(
      [&](std::span<const float> row) { got.emplace_back(row.begin(), row.end()); });
  ASSERT_TRUE(Feed(*observed, prompt).ok());
  observed->ObservePrefillRows(nullptr);

  ASSERT_EQ(got.size(), prompt.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(SameBits(got[i], want[i])) << "row " << i;
  }
  EXPECT_TRUE(SameBits(observed->Logits(), want.back()));

  // Observing changes nothing the session keeps: an unobserved prefill of the same tokens
  // exports the same state, and both decode the same next logits.
  auto plain = NewSession();
  ASSERT_TRUE(plain->Prefill(history).ok());
  ASSERT_TRUE(Feed(*plain, prompt).ok());
  auto a = observed->ExportState();
  auto b = plain->ExportState();
  ASSERT_TRUE(a.ok() && b.ok());
  ExpectSameState(*a, *b);
  if (core::IsMemoryMode(GetParam().mode)) {
    EXPECT_GT(a->tokens_folded, 0);
  }

  // Decode steps and an import are not observed.
  int calls = 0;
  observed->ObservePrefillRows([&](std::span<const float>) { ++calls; });
  ASSERT_TRUE(observed->Append(prompt[0]).ok());
  ASSERT_TRUE(plain->Append(prompt[0]).ok());
  EXPECT_TRUE(SameBits(observed->Logits(), plain->Logits()));
  auto fresh = NewSession();
  fresh->ObservePrefillRows([&](std::span<const float>) { ++calls; });
  ASSERT_TRUE(fresh->ImportState(*b).ok());
  EXPECT_EQ(calls, 0);
}

INSTANTIATE_TEST_SUITE_P(Modes, ObservedPrefillTest,
                         ::testing::Values(Case{KvMode::kFull, false}, Case{KvMode::kFull, true},
                                           Case{KvMode::kSliding, false},
                                           Case{KvMode::kSliding, true}, Case{KvMode::kSink, false},
                                           Case{KvMode::kSink, true}, Case{KvMode::kMemory, false},
                                           Case{KvMode::kMemory, true},
                                           Case{KvMode::kMemoryOnly, false},
                                           Case{KvMode::kMemoryOnly, true},
                                           Case{KvMode::kFull, true, core::DType::kF16},
                                           Case{KvMode::kMemory, false, core::DType::kF16},
                                           Case{KvMode::kFull, false, core::DType::kI8},
                                           Case{KvMode::kFull, true, core::DType::kI8},
                                           Case{KvMode::kSliding, true, core::DType::kI8},
                                           Case{KvMode::kMemory, true, core::DType::kI8}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name(core::KvModeName(info.param.mode));
                           std::erase(name, '_');
                           return name + (info.param.pieces ? "InPieces" : "Whole") +
                                  std::string(core::DTypeName(info.param.kv_dtype));
                         });

}  // namespace
}  // namespace kvfold::memory
