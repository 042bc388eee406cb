#include "inference_svc/planner/admission.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvfold::planner {
namespace {

using ::testing::HasSubstr;

AdmissionRequest At(uint64_t used, uint64_t pool = 1000000, uint64_t requested = 0) {
  AdmissionRequest r;
  r.pool_bytes = pool;
  r.used_bytes = used;
  r.requested_bytes = requested;
  r.max_new_tokens = 101;
  r.num_beams = 4;
  r.retain_reusable_cache = true;
  return r;
}

TEST(AdmissionTest, BoundariesBelongToTheTierAbove) {
  struct Case {
    uint64_t used;  // of a 1,000,000 B pool: 699,900 B = 69.99 %
    AdmissionTier tier;
  };
  const Case cases[] = {
      {0, AdmissionTier::kAdmit},           {699900, AdmissionTier::kAdmit},   // 69.99 %
      {699999, AdmissionTier::kAdmit},                                         // 69.9999 %
      {700000, AdmissionTier::kDegraded},                                      // 70 %
      {849900, AdmissionTier::kDegraded},                                      // 84.99 %
      {850000, AdmissionTier::kSingleBeam},                                    // 85 %
      {949900, AdmissionTier::kSingleBeam},                                    // 94.99 %
      {949999, AdmissionTier::kSingleBeam}, {950000, AdmissionTier::kReject},  // 95 %
      {1000000, AdmissionTier::kReject},    {5000000, AdmissionTier::kReject}};
  for (const Case& c : cases) {
    AdmissionDecision d = Admit(At(c.used));
    EXPECT_EQ(d.tier, c.tier) << c.used;
    EXPECT_EQ(d.admitted, c.tier != AdmissionTier::kReject) << c.used;
  }
}

TEST(AdmissionTest, AdjustmentsPerTier) {
  AdmissionDecision admit = Admit(At(699900));
  EXPECT_EQ(admit.utilization_bp, 6999u);
  EXPECT_EQ(admit.max_new_tokens, 101u);
  EXPECT_EQ(admit.num_beams, 4u);
  EXPECT_TRUE(admit.retain_reusable_cache);
  EXPECT_TRUE(admit.warning.empty());
  EXPECT_EQ(admit.retry_after_ms, 0u);
  EXPECT_TRUE(AdmissionStatus(admit).ok());

  AdmissionDecision degraded = Admit(At(700000));
  EXPECT_EQ(degraded.utilization_bp, 7000u);
  EXPECT_EQ(degraded.max_new_tokens, 50u);  // 101 / 2, rounded down
  EXPECT_EQ(degraded.num_beams, 4u);
  EXPECT_TRUE(degraded.retain_reusable_cache);
  EXPECT_THAT(degraded.warning, HasSubstr("KV pool at 70.00%"));
  EXPECT_THAT(degraded.warning, HasSubstr("max_new_tokens 101 -> 50"));
  EXPECT_TRUE(AdmissionStatus(degraded).ok());

  AdmissionDecision single = Admit(At(850000));
  EXPECT_EQ(single.max_new_tokens, 50u);
  EXPECT_EQ(single.num_beams, 1u);
  EXPECT_FALSE(single.retain_reusable_cache);
  EXPECT_THAT(single.warning, HasSubstr("num_beams 4 -> 1"));
  EXPECT_EQ(single.retry_after_ms, 0u);

  AdmissionDecision reject = Admit(At(950000));
  EXPECT_FALSE(reject.admitted);
  EXPECT_EQ(reject.retry_after_ms, 1000u);
  absl::Status status = AdmissionStatus(reject);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("KV pool at 95.00%"));
  EXPECT_THAT(status.message(), HasSubstr("retry_after_ms=1000"));
  // Over-committed pool: the hint doubles.
  EXPECT_EQ(Admit(At(1000000)).retry_after_ms, 2000u);
}

TEST(AdmissionTest, RequestedBytesCountTowardsUtilisation) {
  // 60 % used + a request of 10 % -> 70 %: degraded.
  EXPECT_EQ(Admit(At(600000, 1000000, 99999)).tier, AdmissionTier::kAdmit);
  EXPECT_EQ(Admit(At(600000, 1000000, 100000)).tier, AdmissionTier::kDegraded);
  EXPECT_EQ(Admit(At(0, 1000000, 950000)).tier, AdmissionTier::kReject);
}

TEST(AdmissionTest, SmallValuesAndEmptyPool) {
  AdmissionRequest r = At(700000);
  r.max_new_tokens = 1;
  EXPECT_EQ(Admit(r).max_new_tokens, 1u);  // never halved to 0
  r.max_new_tokens = 2;
  EXPECT_EQ(Admit(r).max_new_tokens, 1u);
  AdmissionDecision empty = Admit(At(0, 0));
  EXPECT_EQ(empty.tier, AdmissionTier::kReject);
  EXPECT_EQ(AdmissionStatus(empty).code(), absl::StatusCode::kResourceExhausted);
}

TEST(AdmissionTest, HugePoolsDoNotOverflow) {
  const uint64_t unit = 1ULL << 49;  // pool = 10000 * 2^49 is close to 2^62
  EXPECT_EQ(Admit(At(6999 * unit, 10000 * unit)).tier, AdmissionTier::kAdmit);
  EXPECT_EQ(Admit(At(7000 * unit, 10000 * unit)).tier, AdmissionTier::kDegraded);
  EXPECT_EQ(Admit(At(9500 * unit - 1, 10000 * unit)).tier, AdmissionTier::kSingleBeam);
  EXPECT_EQ(Admit(At(9500 * unit, 10000 * unit)).tier, AdmissionTier::kReject);
  AdmissionDecision max = Admit(At(UINT64_MAX, UINT64_MAX, UINT64_MAX));
  EXPECT_EQ(max.tier, AdmissionTier::kReject);
  EXPECT_EQ(max.utilization_bp, 20000u);
}

TEST(AdmissionTest, CustomPolicyAndValidation) {
  AdmissionPolicy p;
  p.degrade_bp = 5000;
  p.single_beam_bp = 6000;
  p.reject_bp = 8000;
  p.retry_after_ms = 250;
  EXPECT_EQ(Admit(At(500000), p).tier, AdmissionTier::kDegraded);
  EXPECT_EQ(Admit(At(800000), p).retry_after_ms, 250u);
  EXPECT_TRUE(ValidateAdmissionPolicy(p).ok());
  EXPECT_TRUE(ValidateAdmissionPolicy(AdmissionPolicy()).ok());
  p.single_beam_bp = 9000;  // above reject
  EXPECT_EQ(ValidateAdmissionPolicy(p).code(), absl::StatusCode::kInvalidArgument);
  p = AdmissionPolicy();
  p.reject_bp = 10001;
  EXPECT_FALSE(ValidateAdmissionPolicy(p).ok());
  p = AdmissionPolicy();
  p.degrade_bp = 0;
  EXPECT_FALSE(ValidateAdmissionPolicy(p).ok());
}

TEST(SessionsBelowTest, StrictlyBelowTheThreshold) {
  EXPECT_EQ(SessionsBelow(100, 10, 9500), 9u);  // 90 < 95
  EXPECT_EQ(SessionsBelow(100, 19, 9500), 4u);  // 5 * 19 = 95 is not below 95
  EXPECT_EQ(SessionsBelow(100, 19, 10000), 5u);
  EXPECT_EQ(SessionsBelow(100, 96, 9500), 0u);
  EXPECT_EQ(SessionsBelow(0, 10, 9500), 0u);
  EXPECT_EQ(SessionsBelow(100, 0, 9500), 0u);
  EXPECT_EQ(SessionsBelow(UINT64_MAX, 1, 9500), 17524406870024074034ULL);  // no 64-bit overflow
  // Consistency with Admit: admitting sessions one by one stops at SessionsBelow.
  const uint64_t pool = 61248888832ULL, session = 2621440000ULL;
  uint64_t admitted = 0;
  while (Admit(At(admitted * session, pool, session)).admitted) ++admitted;
  EXPECT_EQ(admitted, SessionsBelow(pool, session, 9500));
  EXPECT_EQ(admitted, 22u);
}

}  // namespace
}  // namespace kvfold::planner
