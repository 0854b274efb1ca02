// The prompt of a kvctl command that names one (route, handoff): either token ids read from a
// file (--tokens FILE: integers separated by spaces, commas, newlines, or a JSON list) or, for a
// quick look, a text whose UTF-8 bytes stand for its tokens (kvmesh has no tokenizer; prompts
// stored through an engine need --tokens with the engine's ids).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace kvmesh::cli {

struct PromptFlags {
  std::string text;         // the positional PROMPT
  std::string tokens_file;  // --tokens
};

// Adds the positional `prompt` and --tokens to `command`.
void AddPromptFlags(CLI::App* command, PromptFlags* flags);

// The token ids: kInvalidArgument when neither or both are given or a word of the file is not a
// token id (the message names the word); kNotFound when the file cannot be opened.
Result<std::vector<std::int32_t>> PromptTokens(const PromptFlags& flags);

}  // namespace kvmesh::cli
