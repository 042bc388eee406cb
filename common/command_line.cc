#include "common/command_line.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/version.h"

namespace kvfold {
namespace {

// CLI11's formatter, plus the defaults CLI11 leaves out: boolean flags
// ("--sync-writes=true") and empty strings ("--tokenizer TEXT=\"\""), so that --help shows
// every flag's default.
class Formatter : public CLI::Formatter {
 public:
  std::string make_option_opts(const CLI::Option* opt) const override {
    std::string out = CLI::Formatter::make_option_opts(opt);
    if (!opt->get_option_text().empty()) return out;
    if (opt->get_type_size() == 0 && !opt->get_default_str().empty()) {
      out.insert(0, "=" + opt->get_default_str());
    } else if (const std::string type = " " + opt->get_type_name();
               opt->get_type_name().rfind("TEXT", 0) == 0 && opt->get_default_str().empty() &&
               !opt->get_required() && opt->get_expected_max() == 1 &&
               out.rfind(type, 0) == 0) {
      out.insert(type.size(), "=\"\"");
    }
    return out;
  }
};

// "--db_dir=x" -> "--db-dir" when the argument looks like a snake_case long flag.
std::optional<std::string> KebabSpelling(std::string_view arg) {
  if (arg.size() < 3 || arg.substr(0, 2) != "--") return std::nullopt;
  std::string name(arg.substr(0, arg.find('=')));
  if (name.find('_') == std::string::npos) return std::nullopt;
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

}  // namespace

std::string VersionText(std::string_view program) {
  std::string text(program);
  text.append(" ").append(kProjectVersion).append("\ncommit ").append(kGitCommit);
  return text;
}

void ApplyConvention(CLI::App& app) {
  // A flag given twice takes its last value (as with most command lines): a script or a
  // test may append an override to a fixed list of flags.
  app.option_defaults()->always_capture_default()->multi_option_policy(
      CLI::MultiOptionPolicy::TakeLast);
  app.formatter(std::make_shared<Formatter>());
  const std::string version = VersionText(app.get_name());
  app.set_version_flag("--version", version, "Print the version and the git commit, then exit");
}

void AddConfigFileFlag(CLI::App& app) {
  CLI::Option* config = app.set_config("--config", "",
                 "Read flags from this TOML/INI file (keys: long flag names without the "
                 "leading dashes); flags on the command line win");
  config->type_name("FILE");
  // A key that names no flag (a typo, a snake_case spelling) is an error, not ignored.
  app.allow_config_extras(CLI::config_extras_mode::error);
}

CLI::Option* AddSwitch(CLI::App& app, const std::string& name, bool& value,
                       const std::string& help) {
  return app.add_flag(name, value, help)->default_str(value ? "true" : "false");
}

void AddServerAccessFlags(CLI::App& app, const ServerAccessFlags& flags) {
  app.add_option("--tls-cert", *flags.tls_cert,
                 "PEM server certificate (enables TLS with --tls-key)");
  app.add_option("--tls-key", *flags.tls_key, "PEM server private key");
  app.add_option("--tls-client-ca", *flags.tls_client_ca,
                 "PEM CA for client certificates (enables mTLS)");
  app.add_option("--tokens-file", *flags.tokens_file,
                 "bearer tokens file ('<token> <tenant>' lines), reloaded on SIGHUP and when it "
                 "changes");
  AddSwitch(app, "--insecure-no-auth", *flags.insecure_no_auth,
            "serve without a tokens file: every caller is tenant 'default' (development only)");
}

CLI::Validator AtLeast(long long min) {
  const std::string bound = std::to_string(min);
  return CLI::Validator(
      [min, bound](std::string& value) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long double v = std::strtold(value.c_str(), &end);
        if (value.empty() || end != value.c_str() + value.size() || errno == ERANGE) {
          return "must be a number >= " + bound + ", got " + value;
        }
        if (v < static_cast<long double>(min)) return "must be >= " + bound + ", got " + value;
        return std::string();
      },
      min == 0 ? "NONNEGATIVE" : (min == 1 ? "POSITIVE" : ">=" + bound));
}

std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv) {
  // Debian's absl is built without NDEBUG, so its Mutex checks lock order by default:
  // every Lock of every absl::Mutex (gRPC takes several per message) updates one
  // process-wide graph under a global lock, and an order it flags aborts the process.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Servers hold a descriptor per connection: the soft limit (often 1024 while the hard
  // one is far higher) goes up to the hard limit, which only the administrator sets.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  // CLI11 takes the arguments in reverse order. "--name=" is the empty value, as
  // "--name ''" (CLI11 alone would report a missing value).
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) {
    std::string arg = argv[i];
    if (arg.size() > 3 && arg.rfind("--", 0) == 0 && arg.find('=') == arg.size() - 1) {
      arg.pop_back();
      args.emplace_back();
    }
    args.push_back(std::move(arg));
  }
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      app.exit(e);  // --help or --version: printed to stdout
      return kExitOk;
    }
    // "kvfold plan: <what is wrong>", like every other usage error of the binaries.
    std::string command = app.get_name();
    for (const CLI::App* sub = &app; !sub->get_subcommands().empty();) {
      sub = sub->get_subcommands().front();
      command += " " + sub->get_name();
    }
    std::fprintf(stderr, "%s: %s\n", command.c_str(), e.what());
    // CLI11 reports a missing required flag before unknown arguments: name those too.
    const std::vector<std::string> unknown = app.remaining(/*recurse=*/true);
    if (!unknown.empty() && dynamic_cast<const CLI::ExtrasError*>(&e) == nullptr) {
      std::string list;
      for (const std::string& arg : unknown) list += " " + arg;
      std::fprintf(stderr, "%s: and these arguments were not expected:%s\n", command.c_str(),
                   list.c_str());
    }
    for (int i = 1; i < argc; ++i) {
      if (std::optional<std::string> kebab = KebabSpelling(argv[i])) {
        std::fprintf(stderr, "%s: flags are spelled in kebab-case: %s, not %.*s\n",
                     command.c_str(), kebab->c_str(), static_cast<int>(kebab->size()), argv[i]);
      }
    }
    std::fprintf(stderr, "Run `%s --help` for the flags and their defaults.\n",
                 command.c_str());
    return kExitUsage;
  }
  return std::nullopt;
}

}  // namespace kvfold
