// `kvfold plan`: KV-cache capacity planning for a preset or an HF config.json.
// Formulas and field meanings: docs/planner.md.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/command_line.h"
#include "core/dtype.h"
#include "core/kv_mode.h"
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

std::string PresetNames() {
  std::vector<std::string> names;
  for (const ModelSpec& p : planner::Presets()) names.push_back(p.name);
  return absl::StrJoin(names, ", ");
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "kvfold plan: %s\n", std::string(status.message()).c_str());
  return 2;
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
    absl::StatusOr<core::DType> d = core::ParseDType(flags.at(flag));
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

// --name -> value of the flags given on the command line (--json: "").
using PlanFlags = std::map<std::string, std::string>;

int RunPlan(const PlanFlags& flags) {
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
      core::ParseKvModeList(flags.count("modes") ? flags.at("modes") : "all");
  if (!modes.ok()) return Fail(modes.status());

  PlanOptions options;
  if (absl::Status s = ApplyOptions(flags, &options); !s.ok()) return Fail(s);
  absl::StatusOr<planner::Plan> plan = planner::MakePlan(*model, options, *contexts, *modes);
  if (!plan.ok()) return Fail(plan.status());

  std::string out = flags.count("json") ? planner::RenderJson(*plan) : planner::RenderTable(*plan);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

RunFn SetupPlan(CLI::App& app) {
  app.footer(
      "KV-cache size per kvfold mode, and how many sessions fit on a GPU (docs/planner.md). "
      "Exit codes: 0 ok, 2 bad usage or input (unknown preset, bad config, zero or negative "
      "sizes, overflow).");
  // The planner parses the values (units, lists, percentages); CLI11 checks the names.
  struct Flag {
    const char* name;
    const char* default_text;
    std::string help;
  };
  const Flag kFlags[] = {
      {"preset", "", "one of: " + PresetNames()},
      {"config", "", "an HF config.json instead of a preset"},
      {"context", "", "context length in tokens: 20000, 20k (x1000), 128Ki (x1024)"},
      {"contexts", "", "several, e.g. 1k,8k,20k,100k,128k (one table row per mode and T)"},
      {"batch", "1", "sequences per request"},
      {"beams", "1", "beams per sequence; B = batch * beams"},
      {"kv-dtype", "fp16", "fp32|fp16|bf16|fp8|int8|int4"},
      {"weight-dtype", "bf16", "same choices as --kv-dtype"},
      {"window", "",
       "window of sliding/sink/memory modes (default: the model's sliding_window, "
       "else 1024)"},
      {"sink", "4", "sink tokens"},
      {"mem-slots", "96", "memory slots"},
      {"chunk", "256", "fold chunk"},
      {"gpu-memory", "", "e.g. 80GiB, 141GB: adds the KV pool and sessions that fit"},
      {"reserve", "10%", "activation reserve: a size, a percentage, or 0"},
      {"modes", "all", "all or e.g. full,sliding,sink,memory,memory_only"},
  };
  struct State {
    PlanFlags values;
    std::vector<std::pair<std::string, CLI::Option*>> options;
    bool json = false;
  };
  auto state = std::make_shared<State>();
  for (const Flag& f : kFlags) {
    CLI::Option* option = app.add_option(std::string("--") + f.name, state->values[f.name], f.help)
                              ->default_str(f.default_text);
    state->options.emplace_back(f.name, option);
  }
  AddSwitch(app, "--json", state->json, "JSON instead of the table");
  return [state] {
    PlanFlags flags;
    for (const auto& [name, option] : state->options) {
      if (option->count() > 0) flags[name] = state->values.at(name);
    }
    if (state->json) flags["json"] = "";
    return RunPlan(flags);
  };
}

}  // namespace

KVFOLD_REGISTER_COMMAND(plan, "KV-cache size per mode and sessions per GPU (no server needed)",
                        SetupPlan);

}  // namespace kvfold::cli
