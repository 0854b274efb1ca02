#include "cli/live_output.h"

#include <google/protobuf/descriptor.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "common/strings.h"

namespace kvmesh::cli {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using Json = nlohmann::json;

Json Scalar(const Message& m, const Reflection& r, const FieldDescriptor* f, int i) {
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return rep ? r.GetRepeatedInt32(m, f, i) : r.GetInt32(m, f);
    case FieldDescriptor::CPPTYPE_INT64:
      return rep ? r.GetRepeatedInt64(m, f, i) : r.GetInt64(m, f);
    case FieldDescriptor::CPPTYPE_UINT32:
      return rep ? r.GetRepeatedUInt32(m, f, i) : r.GetUInt32(m, f);
    case FieldDescriptor::CPPTYPE_UINT64:
      return rep ? r.GetRepeatedUInt64(m, f, i) : r.GetUInt64(m, f);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return rep ? r.GetRepeatedDouble(m, f, i) : r.GetDouble(m, f);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return rep ? r.GetRepeatedFloat(m, f, i) : r.GetFloat(m, f);
    case FieldDescriptor::CPPTYPE_BOOL: return rep ? r.GetRepeatedBool(m, f, i) : r.GetBool(m, f);
    case FieldDescriptor::CPPTYPE_ENUM:
      return rep ? r.GetRepeatedEnum(m, f, i)->name() : r.GetEnum(m, f)->name();
    case FieldDescriptor::CPPTYPE_STRING: {
      const std::string s = rep ? r.GetRepeatedString(m, f, i) : r.GetString(m, f);
      if (f->type() == FieldDescriptor::TYPE_BYTES) return HexEncode(s.data(), s.size());
      return s;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return ProtoToJson(rep ? r.GetRepeatedMessage(m, f, i) : r.GetMessage(m, f));
  }
  return nullptr;
}

}  // namespace

Json ProtoToJson(const Message& message) {
  Json j = Json::object();
  const google::protobuf::Descriptor* d = message.GetDescriptor();
  const Reflection* r = message.GetReflection();
  for (int k = 0; k < d->field_count(); ++k) {
    const FieldDescriptor* f = d->field(k);
    if (f->is_repeated()) {
      Json list = Json::array();
      for (int i = 0; i < r->FieldSize(message, f); ++i) list.push_back(Scalar(message, *r, f, i));
      j[f->name()] = std::move(list);
    } else if (f->has_presence() && !r->HasField(message, f) &&
               f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      j[f->name()] = nullptr;  // an optional scalar that is not set
    } else {
      j[f->name()] = Scalar(message, *r, f, 0);
    }
  }
  return j;
}

void PrintDocument(const std::string& schema, const Json& fields) {
  Json doc = Json::object();
  doc["schema"] = schema;
  for (const auto& [k, v] : fields.items()) doc[k] = v;
  std::cout << doc.dump(2) << "\n";
}

Table::Table(std::vector<std::string> headers, std::vector<bool> right_aligned)
    : headers_(std::move(headers)), right_(std::move(right_aligned)) {
  right_.resize(headers_.size(), false);
}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

void Table::Print(std::FILE* out) const {
  std::vector<std::size_t> width(headers_.size());
  for (std::size_t c = 0; c < headers_.size(); ++c) {
    width[c] = headers_[c].size();
    for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  const auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const std::size_t pad = width[c] - cells[c].size();
      const bool last = c + 1 == cells.size();
      if (right_[c]) s.append(pad, ' ');
      s += cells[c];
      if (!right_[c] && !last) s.append(pad, ' ');
      if (!last) s += "  ";
    }
    std::fprintf(out, "%s\n", s.c_str());
  };
  line(headers_);
  for (const auto& row : rows_) line(row);
}

std::string ShortId(const std::string& hex, std::size_t n) { return hex.substr(0, n); }

std::string FormatSeconds(double s) {
  if (s <= 0) return "0";
  if (s < 1e-3) return StrCat(FormatFixed(s * 1e6, 0), " us");
  if (s < 1) return StrCat(FormatFixed(s * 1e3, s < 0.01 ? 2 : 1), " ms");
  return StrCat(FormatFixed(s, 2), " s");
}

std::string FormatAge(double s) {
  if (s < 0) return "-";
  const auto t = static_cast<std::int64_t>(s);
  if (t < 60) return StrCat(t, "s");
  char buf[32];
  if (t < 3600) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(t / 60),
                  static_cast<long long>(t % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(t / 3600),
                  static_cast<long long>((t % 3600) / 60));
  }
  return buf;
}

std::string FormatRate(double bytes, double seconds) {
  if (seconds <= 0) return "-";
  const double r = bytes / seconds;
  if (r >= 1024.0 * 1024 * 1024)
    return StrCat(FormatFixed(r / (1024.0 * 1024 * 1024), 2), " GiB/s");
  if (r >= 1024.0 * 1024) return StrCat(FormatFixed(r / (1024.0 * 1024), 1), " MiB/s");
  return StrCat(FormatFixed(r / 1024.0, 1), " KiB/s");
}

std::string Percent(double fraction) { return StrCat(FormatFixed(fraction * 100.0, 2), "%"); }

bool ProgressEnabled(bool force, bool never) {
  if (never) return false;
  return force || isatty(STDERR_FILENO) != 0;
}

ProgressLine::ProgressLine(bool enabled, std::string label)
    : enabled_(enabled), label_(std::move(label)) {}

ProgressLine::~ProgressLine() { Finish(); }

void ProgressLine::Update(std::int64_t done, std::int64_t total, const std::string& suffix) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const bool final = total > 0 && done >= total;
  if (drawn_ && !final && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  constexpr int kWidth = 30;
  std::string bar;
  if (total > 0) {
    const double frac =
        std::clamp(static_cast<double>(done) / static_cast<double>(total), 0.0, 1.0);
    const int filled = static_cast<int>(frac * kWidth);
    bar =
        StrCat("[", std::string(static_cast<std::size_t>(filled), '#'),
               std::string(static_cast<std::size_t>(kWidth - filled), '.'), "] ", done, "/", total);
  } else if (done > 0) {
    bar = StrCat(done);
  }
  std::cerr << "\r" << label_ << " " << bar << (suffix.empty() ? "" : "  ") << suffix << "   "
            << std::flush;
  drawn_ = true;
}

void ProgressLine::Finish() {
  if (enabled_ && drawn_) std::cerr << "\n" << std::flush;
  drawn_ = false;
}

}  // namespace kvmesh::cli
