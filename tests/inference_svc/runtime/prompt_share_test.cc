// Prompt shares (TurnRequest::prompt_share) in a Runtime on a random tiny model: ephemeral
// turns that share a prompt feed it once and copy it to the others, and every turn's tokens
// and prompt log-probabilities equal those of the same turn run alone, in every mode; a
// member whose prompt differs feeds its own.
#include "gtest/gtest.h"
#include "inference_svc/runtime/runtime.h"
#include "tests/testing/tiny_engine.h"

namespace kvfold::runtime {
namespace {

struct Answer {
  std::vector<int32_t> tokens;
  std::vector<engine::TokenLogprobs> prompt_logprobs;
};

Answer Collect(std::unique_ptr<TurnHandle> turn) {
  Answer a;
  while (!turn->Wait(absl::Milliseconds(20), &a.tokens)) {
  }
  turn->TakePromptLogprobs(&a.prompt_logprobs);
  absl::StatusOr<TurnUsage> usage = turn->Finish();
  EXPECT_TRUE(usage.ok()) << usage.status();
  return a;
}

bool SameLogprobs(const std::vector<engine::TokenLogprobs>& a,
                  const std::vector<engine::TokenLogprobs>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].logprob != b[i].logprob || a[i].num_top != b[i].num_top ||
        a[i].top_ids != b[i].top_ids || a[i].top_logprobs != b[i].top_logprobs) {
      return false;
    }
  }
  return true;
}

class PromptShareTest : public ::testing::TestWithParam<core::KvMode> {
 protected:
  void SetUp() override {
    rig_ = testing::MakeTinyEngine(5, {.kv_pool_bytes = size_t{16} << 20});
    projector_ = testing::RandomTinyProjector(testing::TinyProjectorConfig(*rig_->engine, 4, 12, 6),
                                              3, "share-projector");
    Runtime::Deps deps;
    deps.engine = rig_->engine.get();
    deps.projector = projector_.get();
    RuntimeOptions options;
    options.scheduler.max_active_sessions = max_active_;
    runtime_ = std::make_unique<Runtime>(deps, options);
  }

  TurnRequest Request(const std::vector<int32_t>& prompt, uint64_t seed,
                      std::shared_ptr<PromptShare> share, int prompt_logprobs) const {
    TurnRequest r;
    r.ephemeral.mode = GetParam();
    r.ephemeral.window_size = GetParam() == core::KvMode::kMemory ? 12 : 10;
    r.ephemeral.sink_tokens = 2;
    r.prompt_ids = prompt;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    r.sampling.max_new_tokens = 14;
    r.sampling.ignore_eos = true;
    r.prompt_logprobs = prompt_logprobs;
    r.prompt_share = std::move(share);
    return r;
  }

  // Starts the turns one after another (the share makes them wait for each other), then
  // collects their answers.
  std::vector<Answer> RunTogether(std::vector<TurnRequest> requests) {
    std::vector<std::unique_ptr<TurnHandle>> turns;
    for (TurnRequest& r : requests) {
      auto turn = runtime_->StartTurn(caller_, std::move(r));
      EXPECT_TRUE(turn.ok()) << turn.status();
      turns.push_back(std::move(*turn));
    }
    std::vector<Answer> answers;
    for (auto& turn : turns) answers.push_back(Collect(std::move(turn)));
    return answers;
  }

  Answer RunAlone(TurnRequest request) {
    request.prompt_share = nullptr;
    auto turn = runtime_->StartTurn(caller_, std::move(request));
    EXPECT_TRUE(turn.ok()) << turn.status();
    return Collect(std::move(*turn));
  }

  std::unique_ptr<testing::Rig> rig_;
  std::unique_ptr<memory::Projector> projector_;
  std::unique_ptr<Runtime> runtime_;
  int max_active_ = 64;
  Caller caller_{"tenant", ""};
};

TEST_P(PromptShareTest, SharedPromptTurnsEqualTheTurnsRunAlone) {
  const std::vector<int32_t> prompt = testing::RandomIds(57, rig_->model.config.vocab_size, 8);
  for (int prompt_logprobs : {-1, 2}) {
    SCOPED_TRACE(::testing::Message() << "prompt_logprobs " << prompt_logprobs);
    auto share = NewPromptShare(4);
    std::vector<TurnRequest> requests;
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      requests.push_back(Request(prompt, seed, share, prompt_logprobs));
    }
    const uint64_t copies_before = runtime_->scheduler().prompt_copies();
    const std::vector<Answer> together = RunTogether(requests);
    EXPECT_EQ(runtime_->scheduler().prompt_copies() - copies_before, 3u);
    ASSERT_EQ(together.size(), 4u);
    for (size_t i = 0; i < together.size(); ++i) {
      const Answer alone = RunAlone(requests[i]);
      EXPECT_EQ(together[i].tokens, alone.tokens) << "choice " << i;
      EXPECT_EQ(together[i].tokens.size(), 14u);
      EXPECT_TRUE(SameLogprobs(together[i].prompt_logprobs, alone.prompt_logprobs)) << i;
      EXPECT_EQ(together[i].prompt_logprobs.size(), prompt_logprobs < 0 ? 0u : prompt.size() - 1);
    }
    EXPECT_NE(together[0].tokens, together[1].tokens);  // seeds 1 and 2 differ
  }
}

TEST_P(PromptShareTest, AMemberWithAnotherPromptFeedsItsOwn) {
  const int vocab = rig_->model.config.vocab_size;
  const std::vector<int32_t> prompt = testing::RandomIds(40, vocab, 9);
  std::vector<int32_t> other = prompt;
  other.back() = (other.back() + 1) % vocab;
  auto share = NewPromptShare(3);
  std::vector<TurnRequest> requests = {Request(prompt, 7, share, -1), Request(other, 7, share, -1),
                                       Request(prompt, 8, share, -1)};
  const uint64_t copies_before = runtime_->scheduler().prompt_copies();
  const std::vector<Answer> together = RunTogether(requests);
  EXPECT_EQ(runtime_->scheduler().prompt_copies() - copies_before, 1u);
  for (size_t i = 0; i < together.size(); ++i) {
    EXPECT_EQ(together[i].tokens, RunAlone(requests[i]).tokens) << "choice " << i;
  }
}

// More members than turn slots: the admitted members stop waiting for the others (which
// cannot be admitted before slots free up) and share the prompt among themselves; the
// members admitted later feed it again for the ones after them.
TEST_P(PromptShareTest, MoreMembersThanTurnSlotsStillFinish) {
  runtime_.reset();  // again with two turn slots
  max_active_ = 2;
  SetUp();
  const std::vector<int32_t> prompt = testing::RandomIds(33, rig_->model.config.vocab_size, 10);
  auto share = NewPromptShare(5);
  std::vector<TurnRequest> requests;
  for (uint64_t seed = 11; seed <= 15; ++seed) requests.push_back(Request(prompt, seed, share, -1));
  const std::vector<Answer> together = RunTogether(requests);
  EXPECT_GE(runtime_->scheduler().prompt_copies(), 1u);
  for (size_t i = 0; i < together.size(); ++i) {
    EXPECT_EQ(together[i].tokens, RunAlone(requests[i]).tokens) << "choice " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, PromptShareTest,
                         ::testing::Values(core::KvMode::kFull, core::KvMode::kSliding,
                                           core::KvMode::kSink, core::KvMode::kMemory),
                         [](const auto& info) {
                           return std::string(core::KvModeName(info.param));
                         });

}  // namespace
}  // namespace kvfold::runtime
