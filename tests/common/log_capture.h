// LogCapture: what the library logs at warn level and above while the object lives (the last 512
// lines, from spdlog's default logger), for tests that check what an operator would see.
//
// The capturing sink is added to the default logger once, before main (no thread logs yet), and
// a LogCapture only switches it on and off: adding and removing a sink while another thread logs
// (an engine's progress thread reporting a lost peer) is a data race on the logger's sink list,
// which TSan reported.
#pragma once

#include <spdlog/details/log_msg.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

namespace kvmesh::test_log {

class CaptureSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  void Start() {
    std::lock_guard<std::mutex> lock(mutex_);
    lines_.clear();
    active_ = true;
  }
  void Stop() {
    std::lock_guard<std::mutex> lock(mutex_);
    active_ = false;
  }
  std::string Text() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string out;
    for (const std::string& line : lines_) out += line;
    return out;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (!active_ || msg.level < spdlog::level::warn) return;
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    lines_.emplace_back(formatted.data(), formatted.size());
    if (lines_.size() > kMaxLines) lines_.pop_front();
  }
  void flush_() override {}

 private:
  static constexpr std::size_t kMaxLines = 512;
  bool active_ = false;            // guarded by mutex_
  std::deque<std::string> lines_;  // guarded by mutex_
};

// The one sink, on the default logger (added again if the default logger was replaced since).
inline std::shared_ptr<CaptureSink> InstalledCaptureSink() {
  static const std::shared_ptr<CaptureSink> sink = std::make_shared<CaptureSink>();
  auto& sinks = spdlog::default_logger()->sinks();
  if (std::find(sinks.begin(), sinks.end(), sink) == sinks.end()) sinks.push_back(sink);
  return sink;
}

// Before main: installed while the process has one thread.
inline const bool kCaptureSinkInstalled = (InstalledCaptureSink(), true);

class LogCapture {
 public:
  LogCapture() : sink_(InstalledCaptureSink()) { sink_->Start(); }
  ~LogCapture() { sink_->Stop(); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  [[nodiscard]] std::string Text() const { return sink_->Text(); }

 private:
  std::shared_ptr<CaptureSink> sink_;
};

}  // namespace kvmesh::test_log
