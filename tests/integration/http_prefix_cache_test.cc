// The replica's prefix cache through HTTP: an ephemeral request whose prompt starts with
// what an earlier request of the same caller fed starts from a copy of that session, says
// so in usage.prompt_tokens_details.cached_tokens, and answers exactly what a replica that
// never saw the earlier request answers.
#include <nlohmann/json.hpp>

#include "gtest/gtest.h"
#include "tests/common/prometheus_text.h"
#include "tests/integration/http_api_fixture.h"

namespace kvfold::testing {
namespace {

using json = nlohmann::json;

TEST_F(HttpApiTest, AResentConversationStartsFromThePrefixCache) {
  std::vector<int32_t> first = {1};
  for (int i = 0; i < 40; ++i) first.push_back(100 + (37 * i) % 400);
  auto hits = [&](int replica) {
    return ParsePrometheusText(HttpCall(port_[replica], "GET", "/metrics").body)
        .Value("kvfold_prefix_cache_hits_total", {});
  };
  // The first request feeds its prompt (scored, nothing generated): replica 0 keeps it.
  const json feed = {{"prompt", first}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 0}};
  HttpReply fed = Post(0, "/v1/completions", feed);
  ASSERT_EQ(fed.status, 200) << fed.body;
  EXPECT_EQ(Body(fed)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

  // The same prompt and more: 41 tokens from the cache on replica 0, none on replica 1.
  std::vector<int32_t> second = first;
  for (int i = 0; i < 6; ++i) second.push_back(200 + i);
  const json next = {{"prompt", second}, {"max_tokens", 12}, {"temperature", 1.0}, {"seed", 5}};
  const double hits_before = hits(0);
  HttpReply warm = Post(0, "/v1/completions", next);
  ASSERT_EQ(warm.status, 200) << warm.body;
  EXPECT_EQ(hits(0) - hits_before, 1);
  EXPECT_EQ(Body(warm)["usage"]["prompt_tokens_details"]["cached_tokens"], first.size());
  EXPECT_EQ(Body(warm)["usage"]["prompt_tokens"], second.size());
  HttpReply cold = Post(1, "/v1/completions", next);
  ASSERT_EQ(cold.status, 200) << cold.body;
  EXPECT_EQ(Body(cold)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(Body(warm)["choices"][0]["text"], Body(cold)["choices"][0]["text"]);
  EXPECT_EQ(Body(warm)["choices"][0]["finish_reason"], Body(cold)["choices"][0]["finish_reason"]);
}

}  // namespace
}  // namespace kvfold::testing
