// The `kvfold` CLI: one binary, one CLI11 subcommand per cmd_<name>.cc file in this folder.
// Each file registers itself with KVFOLD_REGISTER_COMMAND; main.cc builds the app.
//
// Exit codes (docs/cli.md): 0 success, 1 runtime failure (I/O, RPC error), 2 bad usage or
// bad input.
#ifndef KVFOLD_TOOLS_KVFOLD_COMMAND_H_
#define KVFOLD_TOOLS_KVFOLD_COMMAND_H_

#include <functional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace kvfold::cli {

// Runs a subcommand after its flags were parsed; returns the exit code.
using RunFn = std::function<int()>;
// Adds the subcommand's flags to `app` (bound to state the returned RunFn owns).
using SetupFn = std::function<RunFn(CLI::App& app)>;

struct Command {
  std::string name;
  std::string summary;
  SetupFn setup;
};

std::vector<Command>& Registry();

struct Registrar {
  Registrar(std::string name, std::string summary, SetupFn setup) {
    Registry().push_back({std::move(name), std::move(summary), std::move(setup)});
  }
};

}  // namespace kvfold::cli

#define KVFOLD_REGISTER_COMMAND(name, summary, setup) \
  static ::kvfold::cli::Registrar kvfold_cmd_registrar_##name(#name, summary, setup)

#endif  // KVFOLD_TOOLS_KVFOLD_COMMAND_H_
