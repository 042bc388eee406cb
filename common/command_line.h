// The command-line convention of every kvfold binary (docs/cli.md): one flag library
// (CLI11), kebab-case long flags, `--help` listing every flag with its default, `--version`
// printing the project version and the git commit, and the exit codes below. A `main()`
// builds a CLI::App, calls ApplyConvention before adding flags, binds flags to its config
// struct and calls ParseCommandLine:
//
//   CLI::App app{"what the binary does", "kvfold-memory"};
//   kvfold::ApplyConvention(app);
//   app.add_option("--db-dir", config.db_dir, "RocksDB directory");
//   if (std::optional<int> rc = kvfold::ParseCommandLine(app, argc, argv)) return *rc;
#ifndef KVFOLD_COMMON_COMMAND_LINE_H_
#define KVFOLD_COMMON_COMMAND_LINE_H_

#include <optional>
#include <string>
#include <string_view>

#include "CLI/CLI.hpp"

namespace kvfold {

// Exit codes of every binary.
inline constexpr int kExitOk = 0;       // success, --help, --version
inline constexpr int kExitFailure = 1;  // runtime failure: I/O, RPC, a port in use
inline constexpr int kExitUsage = 2;    // bad or unknown flag, missing or invalid value

// "<program> <project version>\ncommit <git commit or unknown>\n".
std::string VersionText(std::string_view program);

// Sets the convention on a fresh app, before any flag is added (subcommands added later
// inherit it): defaults shown in --help, `--version`, the help formatter, and a flag given
// twice takes its last value.
void ApplyConvention(CLI::App& app);

// `--config FILE`: flags read from a TOML or INI file whose keys are the long flag names
// without dashes (`db-dir = "/var/lib/kvfold-memory"`); the command line wins over the
// file. Used by the servers.
void AddConfigFileFlag(CLI::App& app);

// A boolean flag: `--name` or `--name=true` sets it, `--name=false` clears it. --help shows
// its default.
CLI::Option* AddSwitch(CLI::App& app, const std::string& name, bool& value,
                       const std::string& help);

// Who may call a server, the same flags on both servers: --tls-cert/--tls-key (TLS),
// --tls-client-ca (mTLS), --tokens-file (bearer tokens, reloaded on SIGHUP and on change)
// and --insecure-no-auth.
struct ServerAccessFlags {
  std::string* tls_cert;
  std::string* tls_key;
  std::string* tls_client_ca;
  std::string* tokens_file;
  bool* insecure_no_auth;
};
void AddServerAccessFlags(CLI::App& app, const ServerAccessFlags& flags);

// Validators for integer flags with plain messages ("--threads: must be >= 0, got -1",
// "--threads: must be a number >= 0, got x"; CLI11's NonNegativeNumber and PositiveNumber
// print their bounds as doubles, up to 1.8e308). A number that is not an integer is left
// to the flag's own conversion error.
CLI::Validator AtLeast(long long min);
inline CLI::Validator NonNegative() { return AtLeast(0); }
inline CLI::Validator Positive() { return AtLeast(1); }

// Parses argv ("--name=" gives the flag the empty value). Returns std::nullopt when the
// program should go on; otherwise the code main() returns: kExitOk after --help or
// --version (printed to stdout), kExitUsage after a usage error (the message, and a hint
// for a snake_case spelling, on stderr). Also turns absl::Mutex's deadlock detection off
// for the process (docs/cli.md, "Process settings").
std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv);

}  // namespace kvfold

#endif  // KVFOLD_COMMON_COMMAND_LINE_H_
