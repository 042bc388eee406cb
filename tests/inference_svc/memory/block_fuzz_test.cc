// Sealed blocks with hostile contents. A block's checksum only proves that the bytes are
// the ones a writer sealed; anyone who can write a session's versions to the store can
// seal whatever header and payload they like. So every block below is sealed after its
// mutation and must still end in an error status or in a session that decodes: never a
// crash, an out-of-bounds access (the sanitizer build runs this test too) or a sampled id
// outside the vocabulary.
#include <algorithm>
#include <limits>
#include <random>

#include "gtest/gtest.h"
#include "inference_svc/engine/sampler.h"
#include "inference_svc/memory/memory_session.h"
#include "inference_svc/memory/session_block.h"
#include "tests/testing/tiny_engine.h"

namespace kvfold::memory {
namespace {

using core::KvMode;

struct Fixture {
  std::unique_ptr<testing::Rig> tiny;
  std::unique_ptr<Projector> projector;
};

std::unique_ptr<Fixture> MakeFixture() {
  auto f = std::make_unique<Fixture>();
  f->tiny = testing::MakeTinyEngine(11, {.max_batch_tokens = 32});
  f->projector = testing::RandomTinyProjector(
      testing::TinyProjectorConfig(*f->tiny->engine, 5, 8, 4), 5, "projector-5");
  return f;
}

// A valid block of a session of `mode` that has seen 14 tokens (memory modes folded some).
MemoryBlock ValidBlock(Fixture& f, KvMode mode) {
  engine::SessionOptions options;
  options.mode = mode;
  options.window_size = 8;
  options.sink_tokens = 2;
  auto s = CreateSession(f.tiny->engine.get(), options, f.projector.get());
  EXPECT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE((*s)->Prefill(testing::RandomIds(14, f.tiny->model.config.vocab_size, 3)).ok());
  auto state = (*s)->ExportState();
  EXPECT_TRUE(state.ok()) << state.status();
  auto block = ExportSessionBlock(*state, IdentityFor(*f.tiny->engine, f.projector.get()),
                                  SamplerStateToProto({}, engine::Rng(1).state()));
  EXPECT_TRUE(block.ok()) << block.status();
  return *std::move(block);
}

int64_t Extreme(std::mt19937_64& rng) {
  const int64_t values[] = {0,    1,         -1,           2,         7,           8,   9,   13,
                            14,   15,        64,           255,       256,         511, 512, 513,
                            1000, 1LL << 31, -(1LL << 31), 1LL << 40, -(1LL << 62)};
  return values[rng() % (sizeof(values) / sizeof(values[0]))];
}

// One to three edits of the header's fields or of the payload's bytes.
void Mutate(MemoryBlock* b, std::mt19937_64& rng) {
  v1::MemoryBlockHeader& h = b->header;
  const int edits = 1 + static_cast<int>(rng() % 3);
  for (int e = 0; e < edits; ++e) {
    const int64_t v = Extreme(rng);
    switch (rng() % 14) {
      case 0:
        h.set_mem_slots(static_cast<uint32_t>(v));
        break;
      case 1:
        h.set_tokens_folded(static_cast<uint64_t>(v));
        break;
      case 2:
        h.set_total_tokens(static_cast<uint64_t>(v));
        break;
      case 3:  // a window id changed, added or removed
        if (h.window_token_ids_size() > 0 && rng() % 3 != 0) {
          h.set_window_token_ids(static_cast<int>(rng() % h.window_token_ids_size()),
                                 static_cast<int32_t>(v));
        } else if (rng() % 2 == 0) {
          h.add_window_token_ids(static_cast<int32_t>(rng() % 64));
        } else if (h.window_token_ids_size() > 0) {
          h.mutable_window_token_ids()->RemoveLast();
        }
        break;
      case 4:
        h.set_kv_mode(static_cast<v1::KvMode>(rng() % 7));
        break;
      case 5:
        h.set_window_size(static_cast<uint32_t>(v));
        break;
      case 6:
        h.set_chunk_size(static_cast<uint32_t>(v));
        break;
      case 7:
        h.set_sink_tokens(static_cast<uint32_t>(v));
        break;
      case 8:  // a sink id changed or added
        if (h.sink_token_ids_size() > 0 && rng() % 2 == 0) {
          h.set_sink_token_ids(static_cast<int>(rng() % h.sink_token_ids_size()),
                               static_cast<int32_t>(v));
        } else {
          h.add_sink_token_ids(static_cast<int32_t>(rng() % 64));
        }
        break;
      case 9:
        h.set_dtype(static_cast<v1::Dtype>(rng() % 5));
        break;
      case 10:  // payload bytes: bit flips reach NaN, infinity and huge values
        if (!b->payload.empty()) {
          b->payload[rng() % b->payload.size()] ^= static_cast<char>(1 << (rng() % 8));
        }
        break;
      case 11:  // payload cut or grown
        b->payload.resize(rng() % 2 == 0 ? b->payload.size() / 2
                                         : b->payload.size() + 2 * (rng() % 64));
        break;
      case 12: {  // sampler state: RNG words and parameters
        v1::SamplerState* s = h.mutable_sampler_state();
        if (rng() % 2 == 0) {
          s->clear_rng_state();
          for (int i = 0, n = static_cast<int>(rng() % 6); i < n; ++i) s->add_rng_state(rng() % 3);
        } else {
          s->mutable_params()->set_temperature(static_cast<float>(v));
          s->mutable_params()->set_top_p(rng() % 2 == 0 ? std::numeric_limits<float>::quiet_NaN()
                                                        : static_cast<float>(v));
          s->mutable_params()->set_top_k(static_cast<int32_t>(v));
        }
        break;
      }
      default:
        h.set_hidden_size(static_cast<uint32_t>(v));
    }
  }
  SealMemoryBlock(b);
}

constexpr int kMutationsPerMode = 300;

TEST(BlockFuzzTest, MutatedSealedBlocksNeverCrash) {
  auto f = MakeFixture();
  const int vocab = f->tiny->model.config.vocab_size;
  const BlockExpectations expected = ExpectationsFor(*f->tiny->engine, f->projector.get());
  std::mt19937_64 rng(2024);
  int imported = 0, resumed = 0;
  for (KvMode mode :
       {KvMode::kFull, KvMode::kSliding, KvMode::kSink, KvMode::kMemory, KvMode::kMemoryOnly}) {
    SCOPED_TRACE(core::KvModeName(mode));
    const MemoryBlock valid = ValidBlock(*f, mode);
    // The bytes of a file or of the store's value round-trip too.
    auto parsed = ParseMemoryBlock(SerializeMemoryBlock(valid));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    ASSERT_TRUE(ImportSessionBlock(*parsed, expected).ok());
    for (int i = 0; i < kMutationsPerMode; ++i) {
      MemoryBlock b = valid;
      Mutate(&b, rng);
      v1::SamplerState sampler;
      auto state = ImportSessionBlock(b, expected, &sampler);
      if (!state.ok()) {
        const absl::StatusCode code = state.status().code();
        EXPECT_TRUE(code == absl::StatusCode::kInvalidArgument ||
                    code == absl::StatusCode::kFailedPrecondition ||
                    code == absl::StatusCode::kDataLoss)
            << state.status();
        EXPECT_FALSE(state.status().message().empty());
        continue;
      }
      ++imported;
      // As a replica resumes it: a fresh session of the block's mode and geometry.
      engine::SessionOptions options;
      options.mode = state->mode;
      options.window_size = state->window_size;
      options.sink_tokens = state->sink_tokens;
      auto session = CreateSession(f->tiny->engine.get(), options, f->projector.get());
      if (!session.ok()) continue;
      if (!(*session)->ImportState(*state).ok()) continue;
      ++resumed;
      ASSERT_EQ((*session)->Logits().size(), static_cast<size_t>(vocab));
      engine::SamplingParams params;
      params.temperature = 1.0f;
      params.top_p = 0.9f;
      engine::Sampler s(vocab, params);
      for (int step = 0; step < 3; ++step) {
        const int32_t id = s.Sample((*session)->Logits());
        ASSERT_GE(id, 0);
        ASSERT_LT(id, vocab);
        ASSERT_TRUE((*session)->Append(id).ok());
      }
    }
  }
  // The mutations leave some blocks valid (e.g. a changed id within the vocabulary), so
  // the resume path ran, not only the validation.
  EXPECT_GT(imported, 50);
  EXPECT_GT(resumed, 50);
  std::printf("imported %d, resumed %d of %d mutated blocks\n", imported, resumed,
              5 * kMutationsPerMode);
}

}  // namespace
}  // namespace kvfold::memory
