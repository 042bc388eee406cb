// kvfold: the command-line client and offline tools. See `kvfold --help`.
#include <algorithm>
#include <map>
#include <optional>

#include "common/command_line.h"
#include "tools/kvfold/command.h"

namespace kvfold::cli {

std::vector<Command>& Registry() {
  static std::vector<Command> registry;
  return registry;
}

}  // namespace kvfold::cli

int main(int argc, char** argv) {
  CLI::App app{
      "kvfold: the command-line client and offline tools. `kvfold <command> --help` "
      "describes a command's flags.",
      "kvfold"};
  kvfold::ApplyConvention(app);
  app.require_subcommand(1);
  auto commands = kvfold::cli::Registry();
  std::sort(commands.begin(), commands.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  std::map<const CLI::App*, kvfold::cli::RunFn> runs;
  for (const kvfold::cli::Command& c : commands) {
    CLI::App* sub = app.add_subcommand(c.name, c.summary);
    runs[sub] = c.setup(*sub);
  }
  if (std::optional<int> rc = kvfold::ParseCommandLine(app, argc, argv)) return *rc;
  return runs.at(app.get_subcommands().front())();
}
