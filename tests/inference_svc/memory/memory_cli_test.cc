// End to end through the binaries on the real stories260K model:
// make_random_projector -> kvfold generate --mode memory|memory_only --projector DIR.
// Skips when the shared models are absent (KVFOLD_SHARED_DIR, default <repo>/../shared).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/shared_dir.h"

namespace {

std::string SharedModel() { return kvfold::testing::Stories260K() + "/stories260K.bin"; }

// Runs `command`, returns its stdout; *exit_code gets the exit status.
std::string RunCommand(const std::string& command, int* exit_code) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *exit_code = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

nlohmann::json Generate(const std::string& model, const std::string& mode,
                        const std::string& projector) {
  const std::string cmd = std::string(KVFOLD_BIN) + " generate --model " + model + " --mode " + mode +
                          (projector.empty() ? "" : " --projector " + projector) +
                          " --prompt-ids 1 --max-new-tokens 200 --ignore-eos --json";
  int code = 0;
  const std::string out = RunCommand(cmd, &code);
  EXPECT_EQ(code, 0) << cmd;
  auto j = nlohmann::json::parse(out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << out;
  return j;
}

TEST(MemoryCliTest, GenerateMemoryModesOnStories260K) {
  const std::string model = SharedModel();
  if (!std::filesystem::exists(model)) GTEST_SKIP() << kvfold::testing::MissingShared("models/stories260K/stories260K.bin");
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("kvfold_memory_cli_" + std::to_string(::getpid()));
  int code = 0;
  const std::string made = RunCommand(std::string(MAKE_RANDOM_PROJECTOR_BIN) + " --model " + model +
                                   " --out " + dir + " --mem-slots 16 --window 64 --chunk 32 --seed 5",
                               &code);
  ASSERT_EQ(code, 0) << made;
  EXPECT_NE(made.find("projector_fingerprint"), std::string::npos);

  const nlohmann::json full = Generate(model, "full", "");
  const nlohmann::json memory = Generate(model, "memory", dir);
  const nlohmann::json memory_only = Generate(model, "memory_only", dir);
  for (const auto* j : {&memory, &memory_only}) {
    ASSERT_TRUE(j->contains("token_ids"));
    EXPECT_EQ((*j)["generated_tokens"], 200);
    EXPECT_EQ((*j)["token_ids"].size(), 200u);
    EXPECT_FALSE((*j)["text"].get<std::string>().empty());
  }
  // Before the first fold (window W + C = 96, memory_only C = 32 tokens) memory modes see
  // exactly what full mode sees: the same greedy tokens ("Once upon a time, ...").
  const auto& ft = full["token_ids"];
  for (int i = 0; i < 95; ++i) EXPECT_EQ(memory["token_ids"][i], ft[i]) << "token " << i;
  for (int i = 0; i < 31; ++i) EXPECT_EQ(memory_only["token_ids"][i], ft[i]) << "token " << i;
  // Constant resident KV: M + at most W + C entries (memory), M + C (memory_only), vs the
  // whole history in full mode.
  EXPECT_LT(memory["kv_bytes_resident"].get<int64_t>(), full["kv_bytes_resident"].get<int64_t>());
  EXPECT_LE(memory["resident_tokens"].get<int64_t>(), 16 + 96);
  EXPECT_LE(memory_only["resident_tokens"].get<int64_t>(), 16 + 32);

  // A projector made for another model is refused with exit code 2 (FAILED_PRECONDITION).
  std::filesystem::path json = std::filesystem::path(dir) / "projector.json";
  std::string text;
  {
    FILE* f = fopen(json.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
    fclose(f);
  }
  const size_t at = text.find("\"model_fingerprint\": \"");
  ASSERT_NE(at, std::string::npos);
  text[at + 22] = text[at + 22] == '0' ? '1' : '0';
  {
    FILE* f = fopen(json.c_str(), "wb");
    fwrite(text.data(), 1, text.size(), f);
    fclose(f);
  }
  RunCommand(std::string(KVFOLD_BIN) + " generate --model " + model + " --mode memory --projector " + dir +
          " --prompt-ids 1 --max-new-tokens 2 2>/dev/null",
      &code);
  EXPECT_EQ(code, 2);
  std::filesystem::remove_all(dir);
}

}  // namespace
