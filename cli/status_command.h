// kvctl status: what a running kvnode is — identity, model and cache format, listen addresses,
// every pool's occupancy, the tiers, connections, sequences, requests and hits by tier
// (docs/kvctl.md). Table by default; --json prints kvmesh.status/1.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/command.h"

namespace kvmesh::cli {

void RegisterStatusCommand(CLI::App& app, CommandOutcome& outcome);

}  // namespace kvmesh::cli
