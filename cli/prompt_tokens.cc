// The prompt of a kvctl command: token ids from --tokens FILE or the bytes of a PROMPT text.
#include "cli/prompt_tokens.h"

#include <climits>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/strings.h"

namespace kvmesh::cli {
namespace {

Result<std::vector<std::int32_t>> ReadTokens(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(StrCat("cannot open --tokens ", path));
  std::stringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  std::vector<std::int32_t> tokens;
  for (char& ch : text) {
    if (ch == ',' || ch == '[' || ch == ']' || ch == '\n' || ch == '\t' || ch == '\r') ch = ' ';
  }
  std::istringstream words(text);
  std::string w;
  while (words >> w) {
    char* end = nullptr;
    const long long v = std::strtoll(w.c_str(), &end, 10);
    if (end == w.c_str() || *end != '\0' || v < INT32_MIN || v > INT32_MAX) {
      return Status::InvalidArgument(StrCat("--tokens ", path, ": '", w, "' is not a token id"));
    }
    tokens.push_back(static_cast<std::int32_t>(v));
  }
  return tokens;
}

}  // namespace

void AddPromptFlags(CLI::App* command, PromptFlags* flags) {
  command->add_option("prompt", flags->text, "prompt text (its UTF-8 bytes stand for token ids)");
  command->add_option("--tokens", flags->tokens_file,
                      "file of token ids (spaces, commas, newlines or a JSON list)");
}

Result<std::vector<std::int32_t>> PromptTokens(const PromptFlags& flags) {
  if (flags.text.empty() == flags.tokens_file.empty()) {
    return Status::InvalidArgument("give a PROMPT text or --tokens FILE (one of them)");
  }
  if (!flags.tokens_file.empty()) return ReadTokens(flags.tokens_file);
  std::vector<std::int32_t> tokens;
  tokens.reserve(flags.text.size());
  for (const char ch : flags.text) tokens.push_back(static_cast<unsigned char>(ch));
  return tokens;
}

}  // namespace kvmesh::cli
