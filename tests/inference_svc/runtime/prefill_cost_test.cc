#include "inference_svc/runtime/prefill_cost.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>

namespace kvfold::runtime {
namespace {

// The cost of k tokens entering p entries under a*k + b*k*(p + k/2).
double TrueMs(double a, double b, int64_t p, int64_t k) {
  return static_cast<double>(k) * (a + b * (static_cast<double>(p) + 0.5 * static_cast<double>(k)));
}

TEST(PrefillCostModelTest, NotReadyUntilTwoSpansWereSeen) {
  PrefillCostModel model;
  EXPECT_FALSE(model.ready());
  model.Observe(100, 8, 1.0);
  EXPECT_FALSE(model.ready());
  model.Observe(100, 8, 1.1);  // same span: the slope is not determined
  EXPECT_FALSE(model.ready());
  model.Observe(5000, 8, 9.0);
  EXPECT_TRUE(model.ready());
}

TEST(PrefillCostModelTest, RecoversWeightAndAttentionCostsAndInvertsThem) {
  constexpr double a = 0.02, b = 0.0004;  // ms per token, ms per token and entry
  PrefillCostModel model;
  // A long prompt in chunks of odd sizes, as the scheduler feeds it.
  int64_t p = 0;
  for (int64_t k : {16, 37, 5, 129, 1, 77, 3, 250, 11, 64}) {
    model.Observe(p, k, TrueMs(a, b, p, k));
    p += k;
  }
  ASSERT_TRUE(model.ready());
  for (int64_t resident : {0, 593, 7000, 60000}) {
    for (int64_t k : {1, 9, 256}) {
      EXPECT_NEAR(model.PredictMs(resident, k), TrueMs(a, b, resident, k),
                  1e-6 + 1e-6 * TrueMs(a, b, resident, k))
          << resident << " " << k;
    }
  }
  // The largest chunk within a budget: it fits, one more token does not.
  for (int64_t resident : {0, 1000, 60000}) {
    for (double budget : {0.5, 3.0, 40.0}) {
      const int64_t k = model.TokensWithin(resident, budget, 100000);
      if (k > 0) {
        EXPECT_LE(TrueMs(a, b, resident, k), budget * (1 + 1e-9));
      }
      EXPECT_GT(TrueMs(a, b, resident, k + 1), budget * (1 - 1e-9)) << resident << " " << budget;
    }
  }
  EXPECT_EQ(model.TokensWithin(60000, 3.0, 100000), 0);  // one token costs ~24 ms there
  EXPECT_EQ(model.TokensWithin(0, 1e9, 256), 256);        // capped by the caller's maximum
  EXPECT_EQ(model.TokensWithin(0, 0.0, 256), 0);
}

TEST(PrefillCostModelTest, OutliersAreBoundedAndASlowerMachineIsFollowed) {
  constexpr double a = 0.01, b = 0.001;
  PrefillCostModel model;
  std::mt19937 rng(7);
  int64_t p = 0;
  for (int i = 0; i < 60; ++i) {
    const int64_t k = 1 + static_cast<int64_t>(rng() % 40);
    model.Observe(p, k, TrueMs(a, b, p, k));
    p += k;
  }
  // One chunk preempted for 25 ms moves the prediction by far less than that.
  const double before = model.PredictMs(p, 1);
  model.Observe(p, 1, 25.0);
  EXPECT_LT(model.PredictMs(p, 1), 1.2 * before + 0.01);
  // The machine becomes 3x slower for good: predictions follow within ~60 chunks.
  for (int i = 0; i < 60; ++i) {
    const int64_t k = 1 + static_cast<int64_t>(rng() % 40);
    model.Observe(p, k, 3 * TrueMs(a, b, p, k));
    p += k;
  }
  EXPECT_NEAR(model.PredictMs(p, 16) / TrueMs(a, b, p, 16), 3.0, 0.3);
}

TEST(PrefillCostModelTest, FallingCostsNeverPredictANegativeOrFallingCost) {
  PrefillCostModel model;
  model.Observe(0, 10, 5.0);
  model.Observe(1000, 10, 1.0);  // noise: slower at the short span
  ASSERT_TRUE(model.ready());
  EXPECT_GT(model.PredictMs(100000, 1), 0.0);
  EXPECT_GE(model.PredictMs(100000, 1), model.PredictMs(0, 1));
  EXPECT_GE(model.TokensWithin(100000, 1.0, 256), 0);
}

}  // namespace
}  // namespace kvfold::runtime
