// Eight writers race compare-and-set on one session through the real server: every version
// number is committed exactly once, losers get ABORTED, and the history has no gaps
// (cas_race.h; ceph_test.cc runs the same race across two processes on RADOS).
#include "tests/memory_svc/cas_race.h"
#include "tests/memory_svc/server_fixture.h"

namespace kvfold::memory_svc::testing {
namespace {

class ConcurrencyTest : public ServerFixture {
 protected:
  void SetUp() override {
    config_.store.versions_kept = 1000;  // keep the whole history for the checks
    StartServer();
  }
};

TEST_F(ConcurrencyTest, EightWritersRaceOnOneHead) {
  StoreClient checker = Client();
  // One channel per writer, like separate replicas.
  RunCasRace([this](int) { return Client(); }, checker, "race");
}

}  // namespace
}  // namespace kvfold::memory_svc::testing
