#include "cli/command.h"

#include <iostream>
#include <string>

namespace kvmesh::cli {

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotSupported:
    case StatusCode::kNotFound: return kExitUsage;
    default: return kExitFailure;
  }
}

int ReportParseError(const CLI::App& app, const CLI::ParseError& error) {
  if (error.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
    // --help, --help-all, --version: CLI11 prints them.
    return app.exit(error, std::cout, std::cerr);
  }
  std::cerr << "kvctl: " << error.what() << "\n";
  // Where the usage is: the command's own help once a command was named, else the command list.
  const auto named = app.get_subcommands();
  if (!named.empty()) {
    std::cerr << "run 'kvctl " << named.front()->get_name() << " --help' for its flags\n";
    return kExitUsage;
  }
  std::string commands;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    commands += (commands.empty() ? "" : ", ") + sub->get_name();
  }
  std::cerr << "commands: " << commands << "; run 'kvctl --help' or 'kvctl <command> --help' for "
            << "usage\n";
  return kExitUsage;
}

int ReportOutcome(const Status& status) {
  if (!status.ok()) std::cerr << "kvctl: " << status.message() << "\n";
  return ExitCodeFor(status);
}

}  // namespace kvmesh::cli
