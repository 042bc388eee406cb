// `kvfold plan`: KV-cache capacity planning for a preset or an HF config.json.
// Formulas and field meanings: docs/planner.md.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "inference_svc/planner/kv_planner.h"
#include "inference_svc/planner/model_spec.h"
#include "inference_svc/planner/planner_format.h"
#include "inference_svc/planner/units.h"
#include "tools/kvfold/command.h"

namespace kvfold::cli {
namespace {

using planner::KvMode;
using planner::ModelSpec;
using planner::PlanOptions;

constexpr char kUsage[] = R"(usage: kvfold plan (--preset NAME | --config config.json)
                   (--context T | --contexts T1,T2,...) [flags]

KV-cache size per kvfold mode, and how many sessions fit on a GPU (docs/planner.md).

  --preset NAME        one of: %s
  --config FILE        an HF config.json instead of a preset
  --context T          context length in tokens: 20000, 20k (x1000), 128Ki (x1024)
  --contexts LIST      several, e.g. 1k,8k,20k,100k,128k (one table row per mode and T)
  --batch B            sequences per request (default 1)
  --beams N            beams per sequence (default 1); B = batch * beams
  --kv-dtype D         fp32|fp16|bf16|fp8|int8|int4 (default fp16)
  --weight-dtype D     same choices (default bf16)
  --window W           window of sliding/sink/memory modes (default: the model's
                       sliding_window, else 1024)
  --sink S             sink tokens (default 4)
  --mem-slots M        memory slots (default 96)
  --chunk C            fold chunk (default 256)
  --gpu-memory SIZE    e.g. 80GiB, 141GB: adds the KV pool and sessions that fit
  --reserve X          activation reserve: a size, a percentage, or 0 (default 10%%)
  --modes LIST         all (default) or e.g. full,sliding,sink,memory,memory_only
  --json               JSON instead of the table

Exit codes: 0 ok, 2 bad usage or input (unknown preset, bad config, zero or negative
sizes, overflow).
)";

std::string PresetNames() {
  std::vector<std::string> names;
  for (const ModelSpec& p : planner::Presets()) names.push_back(p.name);
  return absl::StrJoin(names, ", ");
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "kvfold plan: %s\n", std::string(status.message()).c_str());
  return 2;
}

// Splits argv into --name -> value ("" for --json / --help). Accepts "--name value" and
// "--name=value".
absl::Status ParseFlags(int argc, char** argv, std::map<std::string, std::string>* flags) {
  static const char* kValued[] = {"preset",    "config",   "context",      "contexts", "batch",
                                  "beams",     "kv-dtype", "weight-dtype", "window",   "sink",
                                  "mem-slots", "chunk",    "gpu-memory",   "reserve",  "modes"};
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (!absl::StartsWith(arg, "--")) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
    }
    arg.remove_prefix(2);
    std::string name(arg.substr(0, arg.find('=')));
    std::string value;
    bool has_inline = arg.find('=') != absl::string_view::npos;
    if (has_inline) value = std::string(arg.substr(arg.find('=') + 1));
    if (name == "json" || name == "help") {
      if (has_inline)
        return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
    } else if (std::find(std::begin(kValued), std::end(kValued), name) != std::end(kValued)) {
      if (!has_inline) {
        if (i + 1 >= argc)
          return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
        value = argv[++i];
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (!flags->emplace(name, value).second) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " given twice"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelSpec> LoadModel(const std::map<std::string, std::string>& flags) {
  bool preset = flags.count("preset"), config = flags.count("config");
  if (preset == config)
    return absl::InvalidArgumentError("give exactly one of --preset and --config");
  if (preset) return planner::FindPreset(flags.at("preset"));
  const std::string& path = flags.at("config");
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read config file '", path, "'"));
  std::stringstream text;
  text << in.rdbuf();
  std::string name = std::filesystem::path(path).parent_path().filename().string();
  absl::StatusOr<ModelSpec> spec = planner::ParseHfConfig(text.str(), name);
  if (!spec.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", spec.status().message()));
  return spec;
}

absl::Status ApplyOptions(const std::map<std::string, std::string>& flags, PlanOptions* o) {
  auto positive = [&](const char* flag, uint64_t* out) -> absl::Status {
    auto it = flags.find(flag);
    if (it == flags.end()) return absl::OkStatus();
    absl::StatusOr<uint64_t> v = planner::ParsePositive(absl::StrCat("--", flag), it->second);
    if (!v.ok()) return v.status();
    *out = *v;
    return absl::OkStatus();
  };
  for (auto [flag, out] : {std::pair{"batch", &o->batch_size},
                           {"beams", &o->num_beams},
                           {"window", &o->window_size},
                           {"sink", &o->sink_tokens},
                           {"mem-slots", &o->mem_slots},
                           {"chunk", &o->chunk_size}}) {
    if (absl::Status s = positive(flag, out); !s.ok()) return s;
  }
  for (auto [flag, out] :
       {std::pair{"kv-dtype", &o->kv_dtype}, {"weight-dtype", &o->weight_dtype}}) {
    if (!flags.count(flag)) continue;
    absl::StatusOr<planner::Dtype> d = planner::ParseDtype(flags.at(flag));
    if (!d.ok())
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", d.status().message()));
    *out = *d;
  }
  if (flags.count("gpu-memory")) {
    absl::StatusOr<uint64_t> bytes = planner::ParseByteSize(flags.at("gpu-memory"));
    if (!bytes.ok())
      return absl::InvalidArgumentError(absl::StrCat("--gpu-memory: ", bytes.status().message()));
    o->gpu_memory_bytes = *bytes;
  }
  if (flags.count("reserve")) {
    if (!flags.count("gpu-memory"))
      return absl::InvalidArgumentError("--reserve needs --gpu-memory");
    // "0" / "0%" = no reserve (reserve_percent 0); "N%" a share of GPU memory; else bytes.
    absl::string_view r = flags.at("reserve");
    if (r == "0" || r == "0%") {
      o->reserve_percent = 0;
    } else if (absl::EndsWith(r, "%")) {
      r.remove_suffix(1);
      absl::StatusOr<uint64_t> pct = planner::ParsePositive("--reserve percentage", r, 99);
      if (!pct.ok()) return pct.status();
      o->reserve_percent = *pct;
    } else {
      absl::StatusOr<uint64_t> bytes = planner::ParseByteSize(r);
      if (!bytes.ok())
        return absl::InvalidArgumentError(absl::StrCat("--reserve: ", bytes.status().message()));
      o->activation_reserve_bytes = *bytes;
    }
  }
  return absl::OkStatus();
}

int RunPlan(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  if (absl::Status s = ParseFlags(argc, argv, &flags); !s.ok()) return Fail(s);
  if (flags.count("help")) {
    std::printf(kUsage, PresetNames().c_str());
    return 0;
  }
  absl::StatusOr<ModelSpec> model = LoadModel(flags);
  if (!model.ok()) return Fail(model.status());

  if (flags.count("context") == flags.count("contexts")) {
    return Fail(absl::InvalidArgumentError("give exactly one of --context and --contexts"));
  }
  absl::StatusOr<std::vector<uint64_t>> contexts =
      flags.count("context") ? planner::ParseTokenList(flags.at("context"))
                             : planner::ParseTokenList(flags.at("contexts"));
  if (!contexts.ok()) return Fail(contexts.status());
  if (flags.count("context") && contexts->size() != 1) {
    return Fail(absl::InvalidArgumentError("--context takes one value; use --contexts for a list"));
  }
  absl::StatusOr<std::vector<KvMode>> modes =
      planner::ParseKvModes(flags.count("modes") ? flags.at("modes") : "all");
  if (!modes.ok()) return Fail(modes.status());

  PlanOptions options;
  if (absl::Status s = ApplyOptions(flags, &options); !s.ok()) return Fail(s);
  absl::StatusOr<planner::Plan> plan = planner::MakePlan(*model, options, *contexts, *modes);
  if (!plan.ok()) return Fail(plan.status());

  std::string out = flags.count("json") ? planner::RenderJson(*plan) : planner::RenderTable(*plan);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

KVFOLD_REGISTER_COMMAND(plan, "KV-cache size per mode and sessions per GPU (no server needed)",
                        RunPlan);

}  // namespace kvfold::cli
