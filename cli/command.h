// How kvctl subcommands are written, and how their outcome becomes an exit code.
//
// Each subcommand lives in its own file and exposes one function,
//
//   void RegisterFooCommand(CLI::App& app, CommandOutcome& outcome);
//
// that adds a CLI11 subcommand whose callback runs the command and stores its Status in `outcome`.
// Commands print their result to stdout and never print errors themselves: main() prints a failed
// Status once, to stderr, as "kvctl: <message>", and exits with ExitCodeFor(status):
//
//   0  ok
//   2  the command line or its input is wrong: a parse error, kInvalidArgument, kNotSupported,
//      kNotFound (a model preset or file that does not exist)
//   1  anything else (the environment or the node failed: kIoError, kResourceExhausted, ...)
//
// Exceptions stay inside CLI11's parsing; commands return Status. Not thread-safe (one command runs
// per process).
#pragma once

#include <CLI/CLI.hpp>

#include "common/status.h"

namespace kvmesh::cli {

class CommandOutcome {
 public:
  void Set(Status status) { status_ = std::move(status); }
  [[nodiscard]] const Status& status() const { return status_; }

 private:
  Status status_;
};

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

int ExitCodeFor(const Status& status);

// Handles a CLI11 parse error: help and version requests print to stdout and return 0; real errors
// print "kvctl: <what>" and a hint to stderr and return kExitUsage.
int ReportParseError(const CLI::App& app, const CLI::ParseError& error);

// Prints a failed status to stderr; returns its exit code.
int ReportOutcome(const Status& status);

}  // namespace kvmesh::cli
