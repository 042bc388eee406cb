// Runs the built `kvfold plan` binary (path from CMake: $<TARGET_FILE:kvfold>) and checks
// exit codes, the table, and the --json fields.
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string Quote(const std::string& s) {
  std::string q(1, '\'');
  for (char c : s) {
    if (c == '\'') {
      q.append("'\\''");
    } else {
      q.push_back(c);
    }
  }
  q.push_back('\'');
  return q;
}

Result RunPlan(const std::vector<std::string>& args) {
  const std::string err_path = ::testing::TempDir() + "/plan_cli_stderr.txt";
  std::string cmd = Quote(KVFOLD_CLI) + " plan";
  for (const std::string& a : args) {
    cmd.push_back(' ');
    cmd.append(Quote(a));
  }
  cmd.append(" 2>");
  cmd.append(Quote(err_path));
  Result r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) r.out.append(buf, n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  std::stringstream ss;
  ss << err.rdbuf();
  r.err = ss.str();
  return r;
}

Json RunJson(std::vector<std::string> args) {
  args.push_back("--json");
  Result r = RunPlan(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << r.out;
  return j;
}

const Json& Estimate(const Json& j, const std::string& mode, uint64_t context) {
  for (const Json& e : j["estimates"]) {
    if (e["mode"] == mode && e["context_tokens"] == context) return e;
  }
  static const Json kNull;
  ADD_FAILURE() << "no estimate for " << mode << " at " << context;
  return kNull;
}

std::string WriteFile(const std::string& name, const std::string& text) {
  std::string dir = ::testing::TempDir() + "/plan_cli_" + name;
  std::string mk = "mkdir -p " + Quote(dir);
  EXPECT_EQ(std::system(mk.c_str()), 0);
  std::string path = dir + "/config.json";
  std::ofstream(path) << text;
  return path;
}

TEST(PlanCliTest, IssueCommandPrintsTheFigures) {
  Result r = RunPlan({"--preset", "llama-3.1-8b", "--context", "20000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("131,072 B per token"));
  EXPECT_THAT(r.out, HasSubstr("2,621,440,000"));
  EXPECT_THAT(r.out, HasSubstr("786,432"));  // the memory block
  for (const char* mode : {"full ", "sliding ", "sink ", "memory ", "memory_only "}) {
    EXPECT_THAT(r.out, HasSubstr(mode));
  }
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST(PlanCliTest, JsonFields) {
  Json j = RunJson({"--preset", "llama-3.1-8b", "--context", "20000"});
  EXPECT_EQ(j["model"]["name"], "llama-3.1-8b");
  EXPECT_EQ(j["model"]["attention"], "GQA");
  EXPECT_EQ(j["bytes_per_token"], 131072);
  EXPECT_EQ(j["parameter_count"], 8030261248ULL);
  EXPECT_EQ(j["kv_dtype"], "f16");
  EXPECT_EQ(j["window_size"], 1024);
  EXPECT_EQ(j["estimates"].size(), 5u);
  EXPECT_EQ(Estimate(j, "full", 20000)["kv_bytes"], 2621440000ULL);
  const Json& memory = Estimate(j, "memory", 20000);
  EXPECT_EQ(memory["memory_block_bytes"], 786432);
  EXPECT_EQ(memory["resident_tokens"], 1376);
  EXPECT_EQ(memory["fold_prefill_tokens_per_token"], 4.0);
  EXPECT_EQ(Estimate(j, "memory_only", 20000)["resident_tokens"], 352);
}

TEST(PlanCliTest, MistralWindowMhaCounterpartAndBatch) {
  Json mistral =
      RunJson({"--preset", "mistral-7b-v0.1", "--contexts", "4096,8192", "--modes", "full"});
  EXPECT_EQ(Estimate(mistral, "full", 4096)["kv_bytes"], 536870912);
  EXPECT_EQ(Estimate(mistral, "full", 8192)["kv_bytes"], 536870912);

  std::string mha = WriteFile("mistral_mha", R"({"hidden_size": 4096,
      "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
      "num_key_value_heads": 32, "sliding_window": 4096, "vocab_size": 32000})");
  Json j = RunJson({"--config", mha, "--context", "4096", "--modes", "full"});
  EXPECT_EQ(j["model"]["name"], "plan_cli_mistral_mha");
  EXPECT_EQ(j["model"]["attention"], "MHA");
  EXPECT_EQ(Estimate(j, "full", 4096)["kv_bytes"], 2147483648ULL);

  Json batch = RunJson({"--preset", "llama-3.1-8b", "--context", "1", "--batch", "8"});
  EXPECT_EQ(Estimate(batch, "full", 1)["kv_bytes"], 1048576);
  EXPECT_EQ(batch["sequences"], 8);
}

TEST(PlanCliTest, DtypesGeometryAndCapacity) {
  // Any spelling in, the one printed name out (core/dtype.h).
  struct Case {
    const char* flag;
    const char* printed;
    uint64_t bytes;
  };
  const Case dtypes[] = {{"fp32", "f32", 262144}, {"f16", "f16", 131072},
                         {"bf16", "bf16", 131072}, {"fp8", "f8", 65536},
                         {"int8", "int8", 71680},  {"i4", "int4", 38912}};
  for (const Case& c : dtypes) {
    Json j = RunJson(
        {"--preset", "llama-3.1-8b", "--context", "1k", "--kv-dtype", c.flag, "--modes", "full"});
    EXPECT_EQ(j["bytes_per_token"], c.bytes) << c.flag;
    EXPECT_EQ(j["kv_dtype"], c.printed);
  }
  Json j = RunJson({"--preset", "llama-3.1-8b", "--contexts", "20k,128Ki", "--gpu-memory", "80GiB",
                    "--window", "2048", "--sink", "8", "--mem-slots", "64", "--chunk", "512",
                    "--weight-dtype", "fp8", "--reserve", "5%"});
  EXPECT_EQ(j["weight_bytes"], 8030261248ULL);
  EXPECT_EQ(j["activation_reserve_bytes"], (80ULL << 30) / 20);
  EXPECT_EQ(j["kv_pool_bytes"], (80ULL << 30) - 8030261248ULL - (80ULL << 30) / 20);
  EXPECT_EQ(Estimate(j, "sink", 131072)["resident_tokens"], 2056);
  EXPECT_EQ(Estimate(j, "memory", 20000)["resident_tokens"], 2048 + 512 + 64);
  EXPECT_EQ(Estimate(j, "memory", 20000)["memory_block_bytes"], 64 * 4096 * 2);
  const Json& full = Estimate(j, "full", 20000);
  uint64_t pool = j["kv_pool_bytes"];
  uint64_t fit = full["sessions_fit"];
  EXPECT_LT(fit * 2621440000ULL * 100, pool * 95);
  EXPECT_GE((fit + 1) * 2621440000ULL * 100, pool * 95);
  EXPECT_GT(Estimate(j, "memory", 131072)["sessions_fit"], fit);

  Json no_reserve = RunJson(
      {"--preset", "llama-3.1-8b", "--context", "1k", "--gpu-memory", "80GiB", "--reserve", "0"});
  EXPECT_EQ(no_reserve["activation_reserve_bytes"], 0);
  EXPECT_EQ(no_reserve["kv_pool_bytes"], (80ULL << 30) - 16060522496ULL);

  Result table = RunPlan({"--preset", "llama-3.1-8b", "--context", "20k", "--gpu-memory", "80GiB",
                          "--reserve", "8GiB"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("KV pool 61,248,888,832 B"));
  EXPECT_THAT(table.out, HasSubstr("fit<95%"));
}

TEST(PlanCliTest, HelpListsPresets) {
  Result r = RunPlan({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("stories260K"));
  EXPECT_THAT(r.out, HasSubstr("--gpu-memory"));
}

struct BadCase {
  std::vector<std::string> args;
  const char* message;
};

TEST(PlanCliTest, BadInputExitsTwoWithAClearMessage) {
  const std::string malformed = WriteFile("malformed", "{\"hidden_size\": 4096,");
  const std::string zero = WriteFile("zero", R"({"hidden_size": 64, "intermediate_size": 8,
      "num_attention_heads": 4, "num_hidden_layers": 0, "vocab_size": 10})");
  const std::string negative = WriteFile("negative", R"({"hidden_size": 64,
      "intermediate_size": 8, "num_attention_heads": -4, "num_hidden_layers": 2,
      "vocab_size": 10})");
  const std::string missing = WriteFile("missing", R"({"hidden_size": 64,
      "intermediate_size": 8, "num_hidden_layers": 2, "vocab_size": 10})");
  const std::vector<std::string> base = {"--preset", "llama-3.1-8b"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const BadCase cases[] = {
      {{"--preset", "gpt-5", "--context", "1k"}, "unknown preset 'gpt-5'"},
      {{"--config", malformed, "--context", "1k"}, "malformed JSON"},
      {{"--config", zero, "--context", "1k"}, "num_hidden_layers must be > 0"},
      {{"--config", negative, "--context", "1k"}, "num_attention_heads must be > 0, got -4"},
      {{"--config", missing, "--context", "1k"}, "missing required field num_attention_heads"},
      {{"--config", "/nonexistent/config.json", "--context", "1k"}, "cannot read config file"},
      {{"--context", "1k"}, "exactly one of --preset and --config"},
      {{"--preset", "llama-3.1-8b", "--config", zero, "--context", "1k"}, "exactly one of"},
      {base, "exactly one of --context and --contexts"},
      {with({"--context", "0"}), "must be > 0"},
      {with({"--context", "-20000"}), "bad token count"},
      {with({"--context", "1k,2k"}), "--context takes one value"},
      {with({"--contexts", "1k,zero"}), "bad token count"},
      {with({"--context", "1k", "--batch", "0"}), "--batch must be > 0"},
      {with({"--context", "1k", "--batch", "-8"}), "--batch: expected a positive integer"},
      {with({"--context", "1k", "--beams", "0"}), "--beams must be > 0"},
      {with({"--context", "1k", "--window", "0"}), "--window must be > 0"},
      {with({"--context", "1k", "--sink", "0"}), "--sink must be > 0"},
      {with({"--context", "1k", "--mem-slots", "0"}), "--mem-slots must be > 0"},
      {with({"--context", "1k", "--chunk", "-256"}), "--chunk: expected a positive integer"},
      {with({"--context", "1k", "--gpu-memory", "0"}), "must be > 0"},
      {with({"--context", "1k", "--gpu-memory", "-80GiB"}), "no sign"},
      {with({"--context", "1k", "--gpu-memory", "80 parsecs"}), "bad size unit"},
      {with({"--context", "1k", "--reserve", "10%"}), "--reserve needs --gpu-memory"},
      {with({"--context", "1k", "--gpu-memory", "80GiB", "--reserve", "100%"}), "too large"},
      {with({"--context", "1k", "--kv-dtype", "fp7"}), "unknown dtype 'fp7'"},
      {with({"--context", "1k", "--weight-dtype", "int2"}), "unknown dtype 'int2'"},
      {with({"--context", "1k", "--modes", "full,paged"}), "unknown mode 'paged'"},
      {with({"--context", "1k", "--frobnicate"}), "not expected: --frobnicate"},
      {with({"--context"}), "--context: 1 required TEXT missing"},
      {with({"--context", "1k", "stray"}), "not expected: stray"},
      {with({"--context", "100000000000000000"}), "overflow"},
      {with({"--context", "1k", "--batch", "1099511627776", "--beams", "1099511627776"}),
       "overflow"},
      {with({"--context", "99999999999999999999m"}), "too large"},
  };
  for (const BadCase& c : cases) {
    Result r = RunPlan(c.args);
    std::string joined;
    for (const std::string& a : c.args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << joined;
    EXPECT_THAT(r.err, HasSubstr("kvfold plan: ")) << joined;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << joined;
    EXPECT_TRUE(r.out.empty()) << joined << "\n" << r.out;
  }
}

}  // namespace
