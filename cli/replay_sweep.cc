// `kvctl replay --sweep`: the CSV of hit rate against capacity and its gnuplot plot.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <optional>
#include <sstream>

#include "cli/replay_command.h"
#include "cli/replay_report.h"
#include "common/strings.h"

extern char** environ;

namespace kvmesh::cli {
namespace {

namespace fs = std::filesystem;

Status WriteCsv(const std::string& path, const std::vector<ReplayRun>& runs) {
  std::ofstream out(path, std::ios::trunc);
  if (!out.is_open()) {
    return Status::IoError(StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  out << "capacity_blocks,policy,hit_rate,reused_blocks,input_blocks,evictions\n";
  for (const ReplayRun& run : runs) {
    const ReplayResult& r = run.result;
    out << CapacityString(r.capacity_blocks) << "," << r.policy_name() << "," << std::fixed
        << std::setprecision(6) << r.hit_rate() << "," << r.reused_blocks << "," << r.input_blocks
        << "," << r.evicted_blocks << "\n";
  }
  out.flush();
  if (!out) return Status::IoError(StrCat("error writing ", path));
  return Status::Ok();
}

// gnuplot's string literal for `s` (single quotes; a quote is doubled).
std::string GnuplotQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? std::string("''") : std::string(1, c);
  return out + "'";
}

// A script drawing hit rate against capacity (log x), one line per policy (the points inline,
// as datablocks), and the unlimited hit rate as a dashed level. Uses pngcairo where the gnuplot
// build has it, else png.
std::string GnuplotScript(const std::string& png, const std::vector<ReplayRun>& runs,
                          std::int32_t tokens_per_block) {
  std::vector<std::string> policies;  // in order of appearance
  std::optional<double> unlimited;
  for (const ReplayRun& run : runs) {
    const std::string name(run.result.policy_name());
    if (std::find(policies.begin(), policies.end(), name) == policies.end()) {
      policies.push_back(name);
    }
    if (!run.result.capacity_blocks) unlimited = run.result.hit_rate();
  }
  std::ostringstream s;
  s << std::setprecision(6);
  s << "# written by kvctl replay --sweep (replay_sweep.csv holds the same numbers)\n";
  for (std::size_t i = 0; i < policies.size(); ++i) {
    s << "$policy" << i << " << EOD\n";
    for (const ReplayRun& run : runs) {
      if (run.result.capacity_blocks && run.result.policy_name() == policies[i]) {
        s << *run.result.capacity_blocks << " " << run.result.hit_rate() << "\n";
      }
    }
    s << "EOD\n";
  }
  s << "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
    << "  set terminal pngcairo size 900,560 noenhanced\n"
    << "} else {\n"
    << "  set terminal png size 900,560 noenhanced\n"
    << "}\n"
    << "set output " << GnuplotQuote(png) << "\n"
    << "set title 'prefix-cache hit rate against capacity (trace replay)'\n"
    << "set xlabel 'capacity (blocks of " << tokens_per_block << " tokens)'\n"
    << "set ylabel 'hit rate (reused blocks / input blocks)'\n"
    << "set logscale x\nset grid\nset key bottom right\nset yrange [0:*]\n"
    << "plot ";
  for (std::size_t i = 0; i < policies.size(); ++i) {
    if (i > 0) s << ", \\\n     ";
    // The offline optimum is a bound, not a policy one could run: dashed.
    s << "$policy" << i << " using 1:2 with linespoints lw 2 pt 7"
      << (policies[i] == "optimal" ? " dt 3" : "") << " title " << GnuplotQuote(policies[i]);
  }
  if (unlimited) {
    s << (policies.empty() ? "" : ", \\\n     ") << *unlimited
      << " with lines dt 2 lc 'black' title 'unlimited'";
  }
  s << "\nunset output\n";
  return s.str();
}

// Runs `gnuplot script` (no shell). Its stdout goes nowhere; its stderr (warnings such as an x
// range of one capacity) is kept in `log` and shown only when it fails.
Status RunGnuplot(const std::string& script, const std::string& log) {
  const char* env = std::getenv("KVMESH_GNUPLOT");
  const std::string gnuplot = (env != nullptr && *env != '\0') ? env : "gnuplot";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::string arg0 = gnuplot;
  std::string arg1 = script;
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, gnuplot.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return Status::NotFound(StrCat("cannot run ", gnuplot, ": ", std::strerror(rc),
                                   " (install gnuplot, or set KVMESH_GNUPLOT)"));
  }
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) return Status::IoError(StrCat("waitpid: ", std::strerror(errno)));
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    std::ifstream in(log);
    std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
    return Status::IoError(
        StrCat(gnuplot, " failed on ", script, said.empty() ? "" : StrCat(": ", said)));
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::string> SweepPolicies() {
  std::vector<std::string> names;
  for (EvictionPolicyKind kind : AllEvictionPolicies())
    names.emplace_back(EvictionPolicyName(kind));
  names.emplace_back("optimal");
  return names;
}

Result<SweepOutput> WriteSweep(const std::string& dir, const std::vector<ReplayRun>& runs,
                               std::int32_t tokens_per_block, bool no_plot, bool plot_required) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError(StrCat("cannot create --out-dir ", dir, ": ", ec.message()));
  SweepOutput out;
  out.csv_path = (fs::path(dir) / "replay_sweep.csv").string();
  KVMESH_RETURN_IF_ERROR(WriteCsv(out.csv_path, runs));
  if (no_plot) {
    out.plot_note = "skipped (--no-plot)";
    return out;
  }
  // The script names its plot by an absolute path, so that `gnuplot replay_sweep.gp` redraws it
  // from any folder (the data is in the script itself).
  const fs::path abs_dir = fs::absolute(fs::path(dir), ec);
  const std::string png = ((ec ? fs::path(dir) : abs_dir) / "replay_sweep.png").string();
  const std::string script = (fs::path(dir) / "replay_sweep.gp").string();
  {
    std::ofstream gp(script, std::ios::trunc);
    gp << GnuplotScript(png, runs, tokens_per_block);
    gp.flush();
    if (!gp) return Status::IoError(StrCat("cannot write ", script));
  }
  fs::remove(png, ec);  // so that a stale plot is never reported as this one
  const std::string log = (fs::path(dir) / ".replay_sweep.gnuplot.log").string();
  Status plotted = RunGnuplot(script, log);
  fs::remove(log, ec);
  if (plotted.ok() && !fs::exists(png, ec)) {
    plotted = Status::IoError(StrCat("gnuplot wrote no ", png));
  }
  if (!plotted.ok()) {
    if (plot_required) return Status::IoError(StrCat("--plot: ", plotted.message()));
    out.plot_note = StrCat("skipped: ", plotted.message());
    return out;
  }
  out.png_path = png;
  out.plot_note = "written";
  return out;
}

}  // namespace kvmesh::cli
