// kvfold: the command-line client and offline tools. See `kvfold help`.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "tools/kvfold/command.h"

namespace kvfold::cli {

std::vector<Command>& Registry() {
  static std::vector<Command> registry;
  return registry;
}

}  // namespace kvfold::cli

namespace {

void PrintUsage(FILE* out) {
  auto cmds = kvfold::cli::Registry();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return a.name < b.name; });
  std::fprintf(out, "usage: kvfold <command> [flags]\n\ncommands:\n");
  for (const auto& c : cmds) std::fprintf(out, "  %-10s %s\n", c.name.c_str(), c.summary.c_str());
  std::fprintf(out, "\n`kvfold <command> --help` describes a command's flags.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help") ||
      !std::strcmp(argv[1], "-h")) {
    PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : kvfold::cli::Registry()) {
    if (c.name == argv[1]) return c.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "kvfold: unknown command '%s'\n\n", argv[1]);
  PrintUsage(stderr);
  return 2;
}
