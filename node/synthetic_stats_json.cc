#include "node/synthetic_stats_json.h"

#include "common/strings.h"

namespace kvmesh {

nlohmann::json WorkloadStatsJson(const SyntheticWorkloadStats& s) {
  return {{"requests", s.requests},
          {"failed_requests", s.failed_requests},
          {"admit_waits", s.admit_waits},
          {"admit_wait_seconds", s.admit_wait_seconds},
          {"prompt_tokens", s.prompt_tokens},
          {"reused_tokens", s.reused_tokens},
          {"computed_tokens", s.computed_tokens},
          {"input_blocks", s.input_blocks},
          {"hits",
           {{"pool", s.pool_hit_blocks},
            {"host", s.host_hit_blocks},
            {"disk", s.disk_hit_blocks},
            {"remote", s.remote_hit_blocks}}},
          {"hit_rate", s.hit_rate()},
          {"decode_tokens", s.decode_tokens},
          {"checks", s.checks},
          {"check_failures", s.check_failures},
          {"worst_error", s.worst_error},
          {"first_error", s.first_error}};
}

std::string HitRateText(const SyntheticWorkloadStats& s) {
  return StrCat(FormatFixed(s.hit_rate(), 4), " of ", s.input_blocks, " block positions: pool ",
                s.pool_hit_blocks, ", host ", s.host_hit_blocks, ", disk ", s.disk_hit_blocks,
                ", remote ", s.remote_hit_blocks);
}

}  // namespace kvmesh
