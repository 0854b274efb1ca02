// The synthetic engine's counts as a report: one JSON object and one hit-rate line that every
// report of them shares — kvmesh-synth's kvmesh.synthetic/1, each side of its
// kvmesh.disaggregated/1, and `kvctl replay --live`'s kvmesh.replay_live/1 — so that the hits by
// tier always add up to the hit rate (a clustered node's remote hits included).
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "node/synthetic_engine.h"

namespace kvmesh {

// requests, failed_requests, prompt/reused/computed tokens, input_blocks, hits {pool, host, disk,
// remote}, hit_rate, decode_tokens, checks, check_failures, worst_error, first_error.
nlohmann::json WorkloadStatsJson(const SyntheticWorkloadStats& s);

// "0.5881 of 8972 block positions: pool 3164, host 276, disk 1836, remote 0".
std::string HitRateText(const SyntheticWorkloadStats& s);

}  // namespace kvmesh
