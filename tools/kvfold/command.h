// The `kvfold` CLI: one binary, one subcommand per cmd_<name>.cc file in this folder.
// Each file registers itself with KVFOLD_REGISTER_COMMAND; main.cc dispatches.
//
// Exit codes: 0 success, 1 runtime failure (I/O, RPC error), 2 bad usage or bad input.
#ifndef KVFOLD_TOOLS_KVFOLD_COMMAND_H_
#define KVFOLD_TOOLS_KVFOLD_COMMAND_H_

#include <functional>
#include <string>
#include <vector>

namespace kvfold::cli {

// argv[0] is the subcommand name; the rest are its arguments.
using CommandFn = std::function<int(int argc, char** argv)>;

struct Command {
  std::string name;
  std::string summary;
  CommandFn run;
};

std::vector<Command>& Registry();

struct Registrar {
  Registrar(std::string name, std::string summary, CommandFn run) {
    Registry().push_back({std::move(name), std::move(summary), std::move(run)});
  }
};

}  // namespace kvfold::cli

#define KVFOLD_REGISTER_COMMAND(name, summary, fn) \
  static ::kvfold::cli::Registrar kvfold_cmd_registrar_##name(#name, summary, fn)

#endif  // KVFOLD_TOOLS_KVFOLD_COMMAND_H_
