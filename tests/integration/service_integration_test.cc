// Multi-process: kvfold-memory + two kvfold-inference replicas on 127.0.0.1, a random tiny
// model and projector (memory mode folds every 8 tokens past a 16-token window).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/integration/service_cluster.h"
#include "tests/testing/shared_dir.h"

namespace kvfold::testing {
namespace {

constexpr int kMaxNew = 24;

// prefix + number (appending avoids a GCC 12 -Wrestrict false positive on operator+).
std::string Id(const char* prefix, int i) {
  std::string id(prefix);
  id.append(std::to_string(i));
  return id;
}

class ServiceIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(cluster_.Setup(2, &error)) << error;
  }
  Cluster cluster_;
};

// Runs `turns` turns of session `id` on the replicas given by `replica_of(turn)`.
std::vector<std::vector<int32_t>> RunTurns(Cluster& c, const std::string& id, int salt, int turns,
                                           const std::function<int(int)>& replica_of) {
  std::vector<std::vector<int32_t>> out;
  for (int t = 0; t < turns; ++t) {
    TurnResult r = c.Generate(replica_of(t), id, PromptFor(salt, t), kMaxNew);
    EXPECT_TRUE(r.status.ok()) << "turn " << t << ": " << r.status.error_message();
    EXPECT_EQ(static_cast<int>(r.tokens.size()), kMaxNew);
    out.push_back(r.tokens);
  }
  return out;
}

TEST_F(ServiceIntegrationTest, AlternatingReplicasGiveTheUninterruptedTokens) {
  for (v1::KvMode mode : {v1::KV_MODE_MEMORY, v1::KV_MODE_MEMORY_ONLY, v1::KV_MODE_FULL,
                          v1::KV_MODE_SLIDING}) {
    SCOPED_TRACE(v1::KvMode_Name(mode));
    const std::string base = "alt-" + v1::KvMode_Name(mode);
    // Sliding: window larger than the session, so restore is exact (see docs/service.md).
    const uint32_t window = mode == v1::KV_MODE_SLIDING ? 1024 : 0;
    ASSERT_TRUE(cluster_.Create(0, base + "-one", mode, nullptr, window).ok());
    ASSERT_TRUE(cluster_.Create(1, base + "-two", mode, nullptr, window).ok());
    auto uninterrupted = RunTurns(cluster_, base + "-one", 1, 6, [](int) { return 0; });
    auto alternating = RunTurns(cluster_, base + "-two", 1, 6, [](int t) { return t % 2; });
    EXPECT_EQ(uninterrupted, alternating);
    v1::Session one, two;
    ASSERT_TRUE(cluster_.GetSession(1, base + "-one", &one).ok());
    ASSERT_TRUE(cluster_.GetSession(0, base + "-two", &two).ok());
    EXPECT_EQ(one.total_tokens(), 6u * (5 + kMaxNew));
    EXPECT_EQ(one.total_tokens(), two.total_tokens());
    EXPECT_EQ(one.tokens_folded(), two.tokens_folded());
    EXPECT_EQ(two.head_version(), 7u);  // create + 6 turns
    if (mode == v1::KV_MODE_MEMORY) {
      EXPECT_GT(two.tokens_folded(), 0u);
    }
  }
}

TEST_F(ServiceIntegrationTest, KillingAReplicaLosesAtMostTheTurnInFlight) {
  ASSERT_TRUE(cluster_.Create(0, "victim", v1::KV_MODE_MEMORY).ok());
  ASSERT_TRUE(cluster_.Create(0, "reference", v1::KV_MODE_MEMORY).ok());
  // Two committed turns on replica 0.
  for (int t = 0; t < 2; ++t) {
    ASSERT_TRUE(cluster_.Generate(0, "victim", PromptFor(2, t), kMaxNew).status.ok());
    ASSERT_TRUE(cluster_.Generate(0, "reference", PromptFor(2, t), kMaxNew).status.ok());
  }
  // A long turn on replica 0, killed once tokens flow.
  std::atomic<bool> started{false};
  TurnResult killed;
  std::thread turn([&] { killed = cluster_.Generate(0, "victim", PromptFor(99, 0), 4000, &started); });
  while (!started.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  cluster_.replica_process(0).Kill(SIGKILL);
  turn.join();
  EXPECT_FALSE(killed.status.ok());
  v1::Session after;
  ASSERT_TRUE(cluster_.GetSession(1, "victim", &after).ok());
  EXPECT_EQ(after.head_version(), 3u);  // create + 2 committed turns; the killed one is gone
  // The session continues on the other replica exactly as the reference does.
  TurnResult next = cluster_.Generate(1, "victim", PromptFor(2, 2), kMaxNew);
  ASSERT_TRUE(next.status.ok()) << next.status.error_message();
  EXPECT_TRUE(next.final_message.usage().restored_from_store());
  TurnResult ref = cluster_.Generate(1, "reference", PromptFor(2, 2), kMaxNew);
  ASSERT_TRUE(ref.status.ok());
  EXPECT_EQ(next.tokens, ref.tokens);
  // The restarted replica resumes it too.
  ASSERT_TRUE(cluster_.StartReplica(0));
  TurnResult again = cluster_.Generate(0, "victim", PromptFor(2, 3), kMaxNew);
  TurnResult ref_again = cluster_.Generate(1, "reference", PromptFor(2, 3), kMaxNew);
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.tokens, ref_again.tokens);
}

TEST_F(ServiceIntegrationTest, ConcurrentTurnsOnOneSessionAbortOneAndStayConsistent) {
  ASSERT_TRUE(cluster_.Create(0, "contested", v1::KV_MODE_MEMORY).ok());
  ASSERT_TRUE(cluster_.Generate(0, "contested", PromptFor(3, 0), 8).status.ok());
  ASSERT_TRUE(cluster_.Generate(1, "contested", PromptFor(3, 1), 8).status.ok());  // both warm
  TurnResult a, b;
  std::atomic<int> ready{0};
  auto run = [&](int replica, TurnResult* out) {
    ready.fetch_add(1);
    while (ready.load() < 2) {
    }
    *out = cluster_.Generate(replica, "contested", PromptFor(3, 2 + replica), 2000);
  };
  std::thread ta(run, 0, &a), tb(run, 1, &b);
  ta.join();
  tb.join();
  const int ok = a.status.ok() + b.status.ok();
  ASSERT_EQ(ok, 1) << a.status.error_message() << " / " << b.status.error_message();
  const TurnResult& loser = a.status.ok() ? b : a;
  EXPECT_EQ(loser.status.error_code(), grpc::StatusCode::ABORTED);
  const TurnResult& winner = a.status.ok() ? a : b;
  v1::Session s;
  ASSERT_TRUE(cluster_.GetSession(0, "contested", &s).ok());
  EXPECT_EQ(s.head_version(), 4u);
  EXPECT_EQ(s.total_tokens(), 5u + 8 + 5 + 8 + 5 + winner.tokens.size());
  // Both replicas continue the winner's history identically.
  v1::Session forked;
  {
    grpc::ClientContext context;
    v1::ForkSessionRequest fork;
    fork.set_source_session_id("contested");
    fork.set_new_session_id("contested-copy");
    ASSERT_TRUE(cluster_.stub(1).ForkSession(&context, fork, &forked).ok());
  }
  TurnResult on0 = cluster_.Generate(0, "contested", PromptFor(3, 9), kMaxNew);
  TurnResult on1 = cluster_.Generate(1, "contested-copy", PromptFor(3, 9), kMaxNew);
  ASSERT_TRUE(on0.status.ok()) << on0.status.error_message();
  ASSERT_TRUE(on1.status.ok()) << on1.status.error_message();
  EXPECT_EQ(on0.tokens, on1.tokens);
}

TEST_F(ServiceIntegrationTest, SixteenConcurrentSessionsAllComplete) {
  constexpr int kSessions = 16;
  constexpr int kTurns = 3;
  std::vector<std::vector<std::vector<int32_t>>> concurrent(kSessions);
  std::vector<std::thread> threads;
  for (int i = 0; i < kSessions; ++i) {
    ASSERT_TRUE(cluster_.Create(i % 2, Id("c", i), v1::KV_MODE_MEMORY).ok());
  }
  for (int i = 0; i < kSessions; ++i) {
    threads.emplace_back([&, i] {
      concurrent[i] = RunTurns(cluster_, Id("c", i), 100 + i, kTurns,
                               [i](int t) { return (i + t) % 2; });
    });
  }
  for (auto& t : threads) t.join();
  // Each equals the same session run alone, one turn at a time, on one replica.
  for (int i = 0; i < kSessions; ++i) {
    const std::string id = Id("solo", i);
    ASSERT_TRUE(cluster_.Create(0, id, v1::KV_MODE_MEMORY).ok());
    EXPECT_EQ(RunTurns(cluster_, id, 100 + i, kTurns, [](int) { return 0; }), concurrent[i])
        << "session " << i;
  }
}

TEST_F(ServiceIntegrationTest, SigtermFinishesTheTurnInFlightAndExitsZero) {
  ASSERT_TRUE(cluster_.Create(0, "drain", v1::KV_MODE_MEMORY).ok());
  std::atomic<bool> started{false};
  TurnResult r;
  std::thread turn([&] { r = cluster_.Generate(0, "drain", PromptFor(5, 0), 200, &started); });
  while (!started.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(cluster_.replica_process(0).Kill(SIGTERM), 0);
  turn.join();
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens.size(), 200u);
  v1::Session s;
  ASSERT_TRUE(cluster_.GetSession(1, "drain", &s).ok());
  EXPECT_EQ(s.head_version(), 2u);
  EXPECT_EQ(s.total_tokens(), 205u);
}

TEST_F(ServiceIntegrationTest, StoreOutageIsUnavailableAndTheSessionSurvives) {
  ASSERT_TRUE(cluster_.Create(0, "outage", v1::KV_MODE_MEMORY).ok());
  ASSERT_TRUE(cluster_.Create(0, "outage-ref", v1::KV_MODE_MEMORY).ok());
  ASSERT_TRUE(cluster_.Generate(0, "outage", PromptFor(6, 0), kMaxNew).status.ok());
  ASSERT_TRUE(cluster_.Generate(0, "outage-ref", PromptFor(6, 0), kMaxNew).status.ok());
  cluster_.store().Kill(SIGTERM);
  TurnResult down = cluster_.Generate(1, "outage", PromptFor(6, 1), kMaxNew);
  EXPECT_EQ(down.status.error_code(), grpc::StatusCode::UNAVAILABLE) << down.status.error_message();
  ASSERT_TRUE(cluster_.StartStore());  // same address, same DB
  // Each replica's channel to the store reconnects on its own backoff: UNAVAILABLE until
  // then, which a caller retries.
  auto until_available = [&](int replica, const std::string& session) {
    TurnResult r;
    for (int attempt = 0; attempt < 50; ++attempt) {
      r = cluster_.Generate(replica, session, PromptFor(6, 1), kMaxNew);
      if (r.status.error_code() != grpc::StatusCode::UNAVAILABLE) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return r;
  };
  TurnResult up = until_available(1, "outage");
  ASSERT_TRUE(up.status.ok()) << up.status.error_message();
  TurnResult ref = until_available(0, "outage-ref");
  ASSERT_TRUE(ref.status.ok()) << ref.status.error_message();
  EXPECT_EQ(up.tokens, ref.tokens);
}

// The demo's shape on the real model: stories260K with its tokenizer, text prompts, memory
// mode with a random projector (M 8, W 16, C 8), alternating replicas.
TEST(ServiceStoriesTest, TextSessionAlternatingReplicasMatchesUninterrupted) {
  const std::string model = Stories260K() + "/stories260K.bin";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << MissingShared("models/stories260K/stories260K.bin");
  Cluster cluster;
  std::string error;
  ASSERT_TRUE(cluster.Setup(2, &error, {}, model)) << error;
  ASSERT_TRUE(cluster.Create(0, "one", v1::KV_MODE_MEMORY).ok());
  ASSERT_TRUE(cluster.Create(1, "two", v1::KV_MODE_MEMORY).ok());
  const std::vector<std::string> prompts = {"Once upon a time, there was a little girl named Lily.",
                                            "She had a red ball.", "One day, she went to the park.",
                                            "She saw a big dog."};
  std::string text_one, text_two;
  for (size_t t = 0; t < prompts.size(); ++t) {
    TurnResult a = cluster.GenerateText(0, "one", prompts[t], 40, &text_one);
    TurnResult b = cluster.GenerateText(static_cast<int>(t % 2), "two", prompts[t], 40, &text_two);
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    ASSERT_TRUE(b.status.ok()) << b.status.error_message();
    EXPECT_EQ(a.tokens, b.tokens) << "turn " << t;
  }
  EXPECT_EQ(text_one, text_two);
  EXPECT_FALSE(text_one.empty());
  // The first turn is plain llama2.c greedy continuation (nothing folded yet).
  EXPECT_EQ(text_one.rfind(" She", 0), 0u) << text_one;
  v1::Session s;
  ASSERT_TRUE(cluster.GetSession(0, "two", &s).ok());
  EXPECT_GT(s.tokens_folded(), 0u);
  EXPECT_EQ(s.memory_block_bytes(), 8u * 64 * 2);  // M x d fp16
}

// A long prompt is prefilled in chunks between decode steps: a session that is decoding
// keeps producing tokens while another session's 8,000-token prompt is prefilled.
TEST(ServiceSchedulerTest, LongPromptDoesNotStallRunningSessions) {
  Cluster cluster;
  std::string error;
  ASSERT_TRUE(cluster.Setup(1, &error, {"--prefill-chunk-tokens=64"})) << error;
  ASSERT_TRUE(cluster.Create(0, "running", v1::KV_MODE_MEMORY).ok());
  ASSERT_TRUE(cluster.Create(0, "long-prompt", v1::KV_MODE_MEMORY).ok());
  std::atomic<bool> started{false};
  std::atomic<bool> running_done{false};
  TurnResult running;
  std::thread decode([&] {
    running = cluster.Generate(0, "running", PromptFor(8, 0), 40, &started);
    running_done.store(true);
  });
  while (!started.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::vector<int32_t> prompt;
  for (int i = 0; i < 8000; ++i) prompt.push_back(3 + (i * 37) % 250);
  std::atomic<bool> long_first_token{false};
  bool running_finished_first = false;
  std::thread watcher([&] {
    while (!long_first_token.load() && !running_done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    running_finished_first = running_done.load() && !long_first_token.load();
  });
  TurnResult long_turn = cluster.Generate(0, "long-prompt", prompt, 1, &long_first_token);
  decode.join();
  watcher.join();
  ASSERT_TRUE(running.status.ok()) << running.status.error_message();
  ASSERT_TRUE(long_turn.status.ok()) << long_turn.status.error_message();
  EXPECT_EQ(running.tokens.size(), 40u);
  // 40 decode steps interleave with 125 prefill chunks: the decoding session finishes first.
  EXPECT_TRUE(running_finished_first);
  EXPECT_GT(long_turn.final_message.usage().tokens_folded(), 7000u);
}

// Runs a command, returns (exit code, stdout).
std::pair<int, std::string> Capture(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, out};
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int rc = pclose(pipe);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

// The `kvfold chat` and `kvfold sessions` commands against a replica.
TEST(ServiceCliTest, ChatAndSessionsCommands) {
  const std::string model = Stories260K() + "/stories260K.bin";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << MissingShared("models/stories260K/stories260K.bin");
  Cluster cluster;
  std::string error;
  ASSERT_TRUE(cluster.Setup(2, &error, {}, model)) << error;
  const std::string kvfold = KVFOLD_CLI_BIN;
  const std::string a = " --target " + cluster.replica_process(0).address();
  const std::string b = " --target " + cluster.replica_process(1).address();
  // One turn through the CLI equals the same turn through the API.
  auto [rc, text] = Capture(kvfold + " chat" + a +
                            " --session cli --mode memory --raw --prompt 'Once upon a time' "
                            "--max-new-tokens 30 2>/dev/null");
  ASSERT_EQ(rc, 0);
  ASSERT_TRUE(cluster.Create(1, "api", v1::KV_MODE_MEMORY).ok());
  std::string api_text;
  ASSERT_TRUE(cluster.GenerateText(1, "api", "Once upon a time", 30, &api_text).status.ok());
  EXPECT_EQ(text, api_text + "\n");
  // Structured answers (docs/structured-output.md): a document of a schema (given as text
  // or @FILE), one of several texts; two forms at once, an unreadable file and a schema
  // the replica refuses are usage errors.
  const std::string schema = R"({"type":"object","properties":{"name":{"type":"string",)"
                             R"("maxLength":8}},"required":["name"],"additionalProperties":false})";
  auto [rc_doc, doc] = Capture(kvfold + " chat" + a +
                               " --session cli-json --raw --prompt 'Once upon a time' "
                               "--max-new-tokens 200 --json-schema '" +
                               schema + "' 2>/dev/null");
  ASSERT_EQ(rc_doc, 0);
  EXPECT_LE(doc.find("{\"name\":"), 1u) << doc;
  EXPECT_EQ(doc.substr(doc.size() - 3), "\"}\n") << doc;
  const std::string schema_file = cluster.dir() + "/schema.json";
  std::ofstream(schema_file) << schema;
  auto [rc_file, from_file] = Capture(kvfold + " chat" + a +
                                      " --session cli-json-file --raw --prompt 'Once upon a time' "
                                      "--max-new-tokens 200 --json-schema @" +
                                      schema_file + " 2>/dev/null");
  ASSERT_EQ(rc_file, 0);
  EXPECT_EQ(from_file, doc);  // greedy: the same document
  auto [rc_choice, choice] = Capture(kvfold + " chat" + b +
                                     " --session cli-choice --raw --prompt 'Is it a cat?' "
                                     "--choice yes --choice no 2>/dev/null");
  ASSERT_EQ(rc_choice, 0);
  EXPECT_TRUE(choice == "yes\n" || choice == "no\n") << choice;
  EXPECT_EQ(
      Capture(kvfold + " chat" + a + " --session x --prompt x --json-object --choice a 2>/dev/null")
          .first,
      2);
  EXPECT_EQ(Capture(kvfold + " chat" + a +
                    " --session x --prompt x --json-schema @/nonexistent 2>/dev/null")
                .first,
            2);
  EXPECT_EQ(
      Capture(kvfold + " chat" + a +
              " --session cli-bad-schema --prompt x --json-schema '{\"contains\":{}}' 2>/dev/null")
          .first,
      2);
  EXPECT_EQ(Capture(kvfold + " sessions show cli-bad-schema" + a + " 2>/dev/null").first, 2);
  // --lenient-schema: held but for what the subset cannot hold, named on stderr.
  auto [rc_lenient, lenient] =
      Capture(kvfold + " chat" + a +
              " --session cli-lenient --raw --prompt 'Once upon a time' --max-new-tokens 200 "
              "--json-schema '{\"type\":\"array\",\"items\":{\"enum\":[1,2]},\"maxItems\":2,"
              "\"contains\":{\"const\":2}}' --lenient-schema 2>&1");
  ASSERT_EQ(rc_lenient, 0) << lenient;
  EXPECT_NE(lenient.find("[schema] not held: contains at '/'"), std::string::npos) << lenient;
  EXPECT_EQ(
      Capture(kvfold + " chat" + a + " --session x --prompt x --lenient-schema 2>/dev/null").first,
      2);  // without --json-schema
  // Interactive: one turn per stdin line, on the other replica.
  auto [rc2, two_turns] = Capture("printf 'The dog\\nThe cat\\n' | " + kvfold + " chat" + b +
                                  " --session cli --max-new-tokens 5 2>/dev/null");
  ASSERT_EQ(rc2, 0);
  EXPECT_GE(std::count(two_turns.begin(), two_turns.end(), '\n'), 2);
  auto [rc3, show] = Capture(kvfold + " sessions show cli --json" + b);
  ASSERT_EQ(rc3, 0);
  EXPECT_NE(show.find("\"headVersion\":\"4\""), std::string::npos) << show;  // create + 3 turns
  EXPECT_EQ(Capture(kvfold + " sessions fork cli --version 2 --new-id cli-fork" + a).first, 0);
  EXPECT_EQ(Capture(kvfold + " sessions rollback cli --version 2" + a).first, 0);
  auto [rc4, list] = Capture(kvfold + " sessions ls" + b);
  ASSERT_EQ(rc4, 0);
  EXPECT_NE(list.find("cli-fork"), std::string::npos) << list;
  EXPECT_NE(list.find("api"), std::string::npos) << list;
  EXPECT_EQ(Capture(kvfold + " sessions rm cli-fork" + a).first, 0);
  EXPECT_EQ(Capture(kvfold + " sessions show cli-fork" + a + " 2>/dev/null").first, 2);  // NOT_FOUND
  EXPECT_EQ(Capture(kvfold + " sessions frobnicate x" + a + " 2>/dev/null").first, 2);
  EXPECT_EQ(Capture(kvfold + " chat --bogus" + a + " 2>/dev/null").first, 2);
  EXPECT_EQ(Capture(kvfold + " chat --session cli --prompt x --temperature -1" + a + " 2>/dev/null").first, 2);
  // A refused request leaves no session behind: bad sampling is caught before creating it,
  // and a turn the replica refuses (over its max_new_tokens cap) deletes the session made for it.
  EXPECT_EQ(Capture(kvfold + " chat --session orphan1 --prompt x --temperature -1" + a + " 2>/dev/null").first, 2);
  EXPECT_EQ(Capture(kvfold + " sessions show orphan1" + a + " 2>/dev/null").first, 2);  // NOT_FOUND
  EXPECT_EQ(Capture(kvfold + " chat --session orphan2 --prompt x --max-new-tokens 1000000" + a + " 2>/dev/null").first, 2);
  EXPECT_EQ(Capture(kvfold + " sessions show orphan2" + a + " 2>/dev/null").first, 2);
  // An unreachable replica is a runtime failure (exit 1).
  EXPECT_EQ(Capture(kvfold + " sessions ls --target 127.0.0.1:1 --deadline-s 2 2>/dev/null").first, 1);
}

// ListSessions (and `kvfold sessions ls`) report each session's mode, folded tokens, block
// and resident sizes from its stored head, the same values GetSession reports.
TEST_F(ServiceIntegrationTest, ListSessionsReportsTheHeadsModeAndSizes) {
  ASSERT_TRUE(cluster_.Create(0, "folded", v1::KV_MODE_MEMORY).ok());
  ASSERT_TRUE(cluster_.Generate(0, "folded", PromptFor(5, 0), kMaxNew).status.ok());
  ASSERT_TRUE(cluster_.Create(1, "plain", v1::KV_MODE_SLIDING, nullptr, 12).ok());
  ASSERT_TRUE(cluster_.Generate(1, "plain", PromptFor(6, 0), 4).status.ok());
  grpc::ClientContext context;
  v1::ListSessionsResponse list;
  ASSERT_TRUE(cluster_.stub(1).ListSessions(&context, v1::ListSessionsRequest(), &list).ok());
  ASSERT_EQ(list.sessions_size(), 2);
  for (const v1::Session& row : list.sessions()) {
    grpc::ClientContext get_context;
    v1::GetSessionRequest get;
    get.set_session_id(row.session_id());
    v1::Session full;
    ASSERT_TRUE(cluster_.stub(0).GetSession(&get_context, get, &full).ok());
    SCOPED_TRACE(row.session_id());
    EXPECT_EQ(row.config().mode(), full.config().mode());
    EXPECT_EQ(row.config().window_size(), full.config().window_size());
    EXPECT_EQ(row.head_version(), full.head_version());
    EXPECT_EQ(row.total_tokens(), full.total_tokens());
    EXPECT_EQ(row.tokens_folded(), full.tokens_folded());
    EXPECT_EQ(row.resident_tokens(), full.resident_tokens());
    EXPECT_EQ(row.kv_bytes_resident(), full.kv_bytes_resident());
    EXPECT_EQ(row.memory_block_bytes(), full.memory_block_bytes());
    EXPECT_EQ(row.model_fingerprint(), full.model_fingerprint());
    EXPECT_EQ(row.projector_fingerprint(), full.projector_fingerprint());
  }
  const v1::Session& folded = list.sessions(0);
  EXPECT_EQ(folded.config().mode(), v1::KV_MODE_MEMORY);
  EXPECT_GT(folded.tokens_folded(), 0u);  // 5 + 24 tokens pass W + C = 24
  EXPECT_EQ(folded.memory_block_bytes(), 8u * 64 * 2);  // M x hidden_size x fp16
  EXPECT_EQ(list.sessions(1).config().mode(), v1::KV_MODE_SLIDING);
  EXPECT_EQ(list.sessions(1).config().window_size(), 12u);
  // The CLI's table shows them.
  auto [rc, table] = Capture(std::string(KVFOLD_CLI_BIN) + " sessions ls --target " +
                             cluster_.replica_process(0).address());
  ASSERT_EQ(rc, 0) << table;
  const size_t row = table.find("folded");
  ASSERT_NE(row, std::string::npos) << table;
  const std::string line = table.substr(row, table.find('\n', row) - row);
  EXPECT_NE(line.find(" memory "), std::string::npos) << line;
  EXPECT_NE(line.find(" " + std::to_string(folded.tokens_folded()) + " "), std::string::npos)
      << line;
  EXPECT_NE(line.find(" 1024"), std::string::npos) << line;
}

// prompt_only feeds a prompt and commits without generating (an agent's observation): the
// session then continues exactly as one that got the same tokens in its next prompt,
// also when another replica fed the observation (memory mode, folding across it).
TEST_F(ServiceIntegrationTest, PromptOnlyAdvancesTheSessionLikeAPrompt) {
  for (const char* id : {"observed", "whole"}) {
    ASSERT_TRUE(cluster_.Create(0, id, v1::KV_MODE_MEMORY).ok());
    ASSERT_TRUE(cluster_.Generate(0, id, PromptFor(11, 0), kMaxNew).status.ok());
  }
  const std::vector<int32_t> observation = PromptFor(11, 1, 30);
  auto prompt_only = [&](int replica, const std::vector<int32_t>& ids, int* deltas,
                         v1::GenerateFinal* final_message) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::GenerateRequest request;
    request.set_session_id("observed");
    for (int32_t id : ids) request.add_prompt_token_ids(id);
    request.set_prompt_only(true);
    auto reader = cluster_.stub(replica).Generate(&context, request);
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      if (response.has_delta()) ++*deltas;
      if (response.has_final()) *final_message = response.final();
    }
    return reader->Finish();
  };
  v1::Session before;
  ASSERT_TRUE(cluster_.GetSession(1, "observed", &before).ok());
  int deltas = 0;
  v1::GenerateFinal final_message;
  const grpc::Status fed = prompt_only(1, observation, &deltas, &final_message);
  ASSERT_TRUE(fed.ok()) << fed.error_message();
  EXPECT_EQ(deltas, 0);
  EXPECT_EQ(final_message.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(final_message.usage().generated_tokens(), 0u);
  EXPECT_EQ(final_message.usage().prompt_tokens(), observation.size());
  v1::Session after;
  ASSERT_TRUE(cluster_.GetSession(0, "observed", &after).ok());
  EXPECT_EQ(after.head_version(), before.head_version() + 1);
  EXPECT_EQ(after.total_tokens(), before.total_tokens() + observation.size());
  EXPECT_GT(after.tokens_folded(), before.tokens_folded());

  std::vector<int32_t> combined = observation;
  const std::vector<int32_t> next = PromptFor(11, 2);
  combined.insert(combined.end(), next.begin(), next.end());
  TurnResult observed = cluster_.Generate(0, "observed", next, kMaxNew);
  TurnResult whole = cluster_.Generate(0, "whole", combined, kMaxNew);
  ASSERT_TRUE(observed.status.ok() && whole.status.ok());
  EXPECT_EQ(observed.tokens, whole.tokens);

  // Nothing to feed: refused before anything runs.
  EXPECT_EQ(prompt_only(0, {}, &deltas, &final_message).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::Session unchanged;
  ASSERT_TRUE(cluster_.GetSession(0, "observed", &unchanged).ok());
  EXPECT_EQ(unchanged.head_version(), after.head_version() + 1);
}

}  // namespace
}  // namespace kvfold::testing
