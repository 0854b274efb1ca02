// What kvctl's live commands share for their output (docs/kvctl.md): JSON documents built from
// the node's protobuf answers, aligned tables, short content ids, durations and rates, and a
// progress line on stderr.
//
// JSON: ProtoToJson writes every field of a message by its proto name, unset ones with their
// default (fields are only ever added to the operator messages, so documents only gain keys);
// integers are JSON numbers (not proto3 JSON's strings), bytes are hex, enums their names.
// PrintDocument prints {"schema": "kvmesh.<name>/1", ...} — the schema name changes only when
// the meaning of an existing key changes.
//
// Not thread-safe (kvctl runs one command per process).
#pragma once

#include <google/protobuf/message.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvmesh::cli {

nlohmann::json ProtoToJson(const google::protobuf::Message& message);
// Prints `fields` with "schema" first, two-space indented, to stdout.
void PrintDocument(const std::string& schema, const nlohmann::json& fields);

// A table printed with columns padded to their widest cell; numeric columns right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> headers, std::vector<bool> right_aligned = {});
  void AddRow(std::vector<std::string> cells);
  [[nodiscard]] std::size_t rows() const { return rows_.size(); }
  void Print(std::FILE* out = stdout) const;

 private:
  std::vector<std::string> headers_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

// The first `n` characters of a hex content id.
std::string ShortId(const std::string& hex, std::size_t n = 12);
// "850 us", "3.2 ms", "1.25 s" — for seconds.
std::string FormatSeconds(double s);
// "12 s", "4m10s", "3h05m", "-" for a negative age.
std::string FormatAge(double s);
// "1.2 GiB/s" ("-" for 0 seconds).
std::string FormatRate(double bytes, double seconds);
std::string Percent(double fraction);  // "58.81%"

// A progress line on stderr ("\r" updates), drawn only when enabled (a terminal, or --progress).
class ProgressLine {
 public:
  ProgressLine(bool enabled, std::string label);
  ~ProgressLine();
  // done of total (total <= 0: unknown), with a free-form suffix.
  void Update(std::int64_t done, std::int64_t total, const std::string& suffix = "");
  void Finish();

 private:
  bool enabled_;
  std::string label_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_;
};

// Whether progress lines are on: --progress forces, --no-progress stops, else stderr is a tty.
bool ProgressEnabled(bool force, bool never);

}  // namespace kvmesh::cli
