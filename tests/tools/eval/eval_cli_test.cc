// `kvfold eval` end to end through the binaries, on a tiny random model (vocab 300) with
// the 300-piece tokenizer of tiny_tokenizer.h and random projectors:
//  - budget >= document length: every mode's NLL equals full's (within 1e-5), per token;
//  - the memory-mode NLL eval reports equals the NLL computed from `kvfold logits` of the
//    same session (memory and memory_only, many folds), and the JSON means match the
//    per-token values;
//  - bad flags exit 2 with a message.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/tools/eval/tiny_tokenizer.h"
#include "tests/testing/shared_dir.h"

namespace {

namespace fs = std::filesystem;

// Runs `command` with stderr merged into stdout; *exit_code gets the exit status.
std::string RunCommand(const std::string& command, int* exit_code) {
  std::string out;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
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

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// --per-token TSV: rows of (doc, pos, token) and one NLL column per mode ("-" = not scored).
struct PerToken {
  std::vector<std::string> modes;
  std::vector<int> doc, pos, token;
  std::map<std::string, std::vector<double>> nll;
};

PerToken ParsePerToken(const std::string& text) {
  PerToken out;
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  std::vector<std::string> head = absl::StrSplit(lines.at(0), '\t');
  out.modes.assign(head.begin() + 3, head.end());
  for (size_t l = 1; l < lines.size(); ++l) {
    std::vector<std::string> cells = absl::StrSplit(lines[l], '\t');
    EXPECT_EQ(cells.size(), head.size());
    int v[3];
    for (int k = 0; k < 3; ++k) EXPECT_TRUE(absl::SimpleAtoi(cells[static_cast<size_t>(k)], &v[k]));
    out.doc.push_back(v[0]);
    out.pos.push_back(v[1]);
    out.token.push_back(v[2]);
    for (size_t m = 0; m < out.modes.size(); ++m) {
      double x = std::nan("");
      if (cells[m + 3] != "-") {
        EXPECT_TRUE(absl::SimpleAtod(cells[m + 3], &x));
      }
      out.nll[out.modes[m]].push_back(x);
    }
  }
  return out;
}

class EvalCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string((fs::temp_directory_path() /
                            ("kvfold_eval_cli_" + std::to_string(::getpid()))).string());
    fs::create_directories(*dir_);
    ASSERT_TRUE(kvfold::eval_test::WriteTinyTokenizer(*dir_ + "/tok.bin"));
    int code = 0;
    std::string out = RunCommand(std::string(MAKE_RANDOM_MODEL_BIN) +
                                     " --shape tiny --vocab-size 300 --seed 11 --out " + *dir_ + "/model",
                                 &code);
    ASSERT_EQ(code, 0) << out;
    // Big: no fold in documents shorter than C = 160 (memory_only) or W + C (memory).
    out = RunCommand(std::string(MAKE_RANDOM_PROJECTOR_BIN) + " --model " + *dir_ +
                         "/model --out " + *dir_ + "/proj_big --mem-slots 4 --window 40 --chunk 160 --seed 2",
                     &code);
    ASSERT_EQ(code, 0) << out;
    // Small: folds every 8 tokens after the first 24.
    out = RunCommand(std::string(MAKE_RANDOM_PROJECTOR_BIN) + " --model " + *dir_ +
                         "/model --out " + *dir_ + "/proj_small --mem-slots 5 --window 16 --chunk 8 --heads 4 --seed 3",
                     &code);
    ASSERT_EQ(code, 0) << out;
    // Three short documents (< 160 tokens) and one long one (a few hundred tokens).
    std::ofstream text(*dir_ + "/text.txt");
    text << "the cat and the hat sat in the sun.\n<|endoftext|>\n"
            "Ann had a red kettle, and then the kettle sang. Ann smiled.\n<|endoftext|>\n"
            "in the end, the tin man ran to the dune and hid.\n<|endoftext|>\n"
            "Tom and Ann went to the farm. ";
    for (int i = 0; i < 12; ++i) text << "the hen sat on an egg, then the duck ran in the rain " << i << ". ";
    text << "At last Tom saw the kettle.\n";
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  static std::string Eval(const std::string& args, int* code) {
    return RunCommand(std::string(KVFOLD_BIN) + " eval --model " + *dir_ + "/model --tokenizer " +
                          *dir_ + "/tok.bin --text " + *dir_ + "/text.txt --split-endoftext " + args,
                      code);
  }

  static std::string* dir_;
};

std::string* EvalCliTest::dir_ = nullptr;

TEST_F(EvalCliTest, EveryModeEqualsFullWhenTheBudgetCoversTheDocument) {
  int code = 0;
  const std::string out = Eval("--docs first:3 --projector " + *dir_ + "/proj_big --budget 200 --sink 3 --json " +
                                   *dir_ + "/big.json --per-token " + *dir_ + "/big.tsv",
                               &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("| memory | 4 + 40 + 160 = 204 |"), std::string::npos) << out;
  EXPECT_NE(out.find("| sink | 3 + 197 = 200 |"), std::string::npos) << out;
  const PerToken pt = ParsePerToken(ReadAll(*dir_ + "/big.tsv"));
  ASSERT_EQ(pt.modes, (std::vector<std::string>{"full", "sliding", "sink", "memory", "memory_only"}));
  ASSERT_GT(pt.pos.size(), 60u);
  int max_pos = 0;
  for (size_t r = 0; r < pt.pos.size(); ++r) {
    max_pos = std::max(max_pos, pt.pos[r]);
    const double full = pt.nll.at("full")[r];
    ASSERT_TRUE(std::isfinite(full));
    for (const auto& m : pt.modes) EXPECT_NEAR(pt.nll.at(m)[r], full, 1e-5) << m << " row " << r;
  }
  EXPECT_LT(max_pos, 160);
  const auto j = nlohmann::json::parse(ReadAll(*dir_ + "/big.json"));
  const double full_all = j["modes"]["full"]["all"]["nll"].get<double>();
  EXPECT_GT(full_all, 1.0);  // a random model: close to log(300) = 5.7
  for (const auto& m : pt.modes) {
    EXPECT_NEAR(j["modes"][m]["all"]["nll"].get<double>(), full_all, 1e-5) << m;
    EXPECT_EQ(j["modes"][m]["all"]["tokens"].get<int64_t>(), static_cast<int64_t>(pt.pos.size()));
  }
  EXPECT_EQ(j["modes"]["memory"]["budget"].get<int64_t>(), 204);
  EXPECT_EQ(j["modes"]["memory_only"]["budget"].get<int64_t>(), 164);
}

// NLL of `target` from a row of float32 logits, in double (independent of eval's code).
double NllFromLogits(const float* row, int vocab, int target) {
  double max = -1e300;
  for (int v = 0; v < vocab; ++v) max = std::max(max, static_cast<double>(row[v]));
  double z = 0.0;
  for (int v = 0; v < vocab; ++v) z += std::exp(static_cast<double>(row[v]) - max);
  return max + std::log(z) - static_cast<double>(row[target]);
}

TEST_F(EvalCliTest, MemoryNllEqualsKvfoldLogitsOfTheSameSession) {
  int code = 0;
  const std::string out = Eval("--docs last:1 --recall --buckets 64 --projector " + *dir_ +
                                   "/proj_small --json " + *dir_ + "/small.json --per-token " + *dir_ +
                                   "/small.tsv",
                               &code);
  ASSERT_EQ(code, 0) << out;
  const PerToken pt = ParsePerToken(ReadAll(*dir_ + "/small.tsv"));
  const size_t n = pt.pos.size();
  ASSERT_GT(n, 200u);  // many folds of 8 tokens
  std::string ids = "1";  // BOS, then the scored targets in order
  for (int t : pt.token) absl::StrAppend(&ids, ",", t);
  for (const std::string mode : {"memory", "memory_only", "sink"}) {
    const std::string logits = *dir_ + "/" + mode + ".f32";
    const std::string cmd = std::string(KVFOLD_BIN) + " logits --model " + *dir_ + "/model --projector " +
                            *dir_ + "/proj_small --mode " + mode + " --window 25 --sink 4 --tokens " + ids +
                            " --out " + logits;
    std::string lout = RunCommand(cmd, &code);
    ASSERT_EQ(code, 0) << lout;
    const std::string raw = ReadAll(logits);
    ASSERT_EQ(raw.size(), (n + 1) * 300 * sizeof(float));
    const float* rows = reinterpret_cast<const float*>(raw.data());
    double differs_from_full = 0.0;
    for (size_t r = 0; r < n; ++r) {
      const double expected = NllFromLogits(rows + r * 300, 300, pt.token[r]);
      EXPECT_NEAR(pt.nll.at(mode)[r], expected, 1e-12) << mode << " row " << r;
      differs_from_full = std::max(differs_from_full, std::abs(pt.nll.at(mode)[r] - pt.nll.at("full")[r]));
    }
    EXPECT_GT(differs_from_full, 1e-3) << mode << ": folds/eviction must change something";
  }
  // JSON means are the means of the per-token values, over the stated positions.
  const auto j = nlohmann::json::parse(ReadAll(*dir_ + "/small.json"));
  EXPECT_EQ(j["beyond_window_from"].get<int64_t>(), 24);
  EXPECT_EQ(j["beyond_budget_from"].get<int64_t>(), 29);
  for (const auto& m : pt.modes) {
    double all = 0, beyond = 0;
    int64_t nb = 0;
    std::vector<double> bucket_sum(16, 0.0);
    for (size_t r = 0; r < n; ++r) {
      all += pt.nll.at(m)[r];
      if (pt.pos[r] > 24) {
        beyond += pt.nll.at(m)[r];
        ++nb;
      }
      bucket_sum[static_cast<size_t>(pt.pos[r] / 64)] += pt.nll.at(m)[r];
    }
    const auto& jm = j["modes"][m];
    EXPECT_NEAR(jm["all"]["nll"].get<double>(), all / n, 1e-6) << m;
    EXPECT_NEAR(jm["beyond_window"]["nll"].get<double>(), beyond / nb, 1e-6) << m;
    EXPECT_EQ(jm["beyond_window"]["tokens"].get<int64_t>(), nb);
    ASSERT_TRUE(jm.contains("recall"));
    EXPECT_GT(jm["recall"]["tokens"].get<int64_t>(), 0) << "Tom, hen, egg, ... recur far apart";
    EXPECT_NEAR(jm["buckets"][1]["nll"].get<double>(), bucket_sum[1] / 64, 1e-6) << m;
  }
  // Largest resident KV entries: the stated budgets.
  EXPECT_EQ(j["modes"]["memory"]["max_resident"].get<int64_t>(), 29);
  EXPECT_EQ(j["modes"]["memory_only"]["max_resident"].get<int64_t>(), 13);
  EXPECT_EQ(j["modes"]["sliding"]["max_resident"].get<int64_t>(), 29);
  EXPECT_EQ(j["modes"]["sink"]["max_resident"].get<int64_t>(), 29);
}

TEST_F(EvalCliTest, BadFlagsExitTwoWithAMessage) {
  const std::string proj = " --projector " + *dir_ + "/proj_small";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--bogus 1" + proj, "not expected: 1 --bogus"},
      {"--modes full,quantum" + proj, "unknown mode 'quantum'"},
      {"--modes full,full" + proj, "repeats"},
      {"--modes memory", "memory modes need --projector"},
      {"--modes sliding", "--budget"},
      {"--docs last:0" + proj, "--docs"},
      {"--docs last:99" + proj, "the text has 4"},
      {"--budget 1" + proj, "--budget must be >= 2"},
      {"--budget 4 --sink 4" + proj, "must exceed --sink"},
      {"--threads x" + proj, "--threads: must be a number >= 0, got x"},
      {"--threads -2" + proj, "--threads: must be >= 0, got -2"},
      {"--projector /nonexistent/projector", "projector"},
  };
  for (const auto& [args, message] : cases) {
    int code = 0;
    const std::string out = Eval(args, &code);
    EXPECT_EQ(code, 2) << args << "\n" << out;
    EXPECT_NE(out.find(message), std::string::npos) << args << "\n" << out;
  }
  int code = 0;
  std::string out = RunCommand(std::string(KVFOLD_BIN) + " eval --model " + *dir_ + "/model", &code);
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find("--text"), std::string::npos) << out;
  out = RunCommand(std::string(KVFOLD_BIN) + " eval --model " + *dir_ + "/model --tokenizer " + *dir_ +
                       "/tok.bin --text /nonexistent.txt --budget 10",
                   &code);
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find("cannot open --text"), std::string::npos) << out;
}

// The protocol reproduces the published reference loss of stories260K:
// first 100 stories, BOS + llama2.c encode, truncated to 512, full context: 1.408
// nats/token over 37,072 predicted tokens.
TEST(EvalStories260KTest, FullModeReproducesTheReferenceLoss) {
  const std::string dir = kvfold::testing::SharedDir();
  const std::string model = dir + "/models/stories260K/stories260K.bin";
  const std::string text = dir + "/text/tinystories_train_sample.txt";
  if (!fs::exists(model) || !fs::exists(text)) GTEST_SKIP() << kvfold::testing::MissingShared("models/stories260K and text/tinystories_train_sample.txt");
  const std::string json = (fs::temp_directory_path() /
                            ("kvfold_eval_ref_" + std::to_string(::getpid()) + ".json")).string();
  int code = 0;
  const std::string out = RunCommand(std::string(KVFOLD_BIN) + " eval --model " + model + " --text " + text +
                                         " --split-endoftext --docs first:100 --modes full --json " + json,
                                     &code);
  ASSERT_EQ(code, 0) << out;
  const auto j = nlohmann::json::parse(ReadAll(json));
  fs::remove(json);
  EXPECT_EQ(j["modes"]["full"]["all"]["tokens"].get<int64_t>(), 37072);
  EXPECT_NEAR(j["modes"]["full"]["all"]["nll"].get<double>(), 1.408, 0.0005);
  EXPECT_EQ(j["modes"]["full"]["max_resident"].get<int64_t>(), 511);
}

}  // namespace
