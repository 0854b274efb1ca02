// The control plane's shared secret: where it comes from and what is accepted.
//
// Exactly one source is used, in this order of precedence of what is set: the value itself, an
// environment variable's name, a file's path (its content with one trailing newline removed); when
// none is set, the environment variable KVMESH_SECRET. The secret must be at least
// kMinSecretBytes (16) bytes. A secret file readable by group or others is accepted with a warning
// returned in `warning` (the caller logs it).
//
// Thread safety: reads the environment and the file system; otherwise pure.
#pragma once

#include <string>

#include "common/result.h"

namespace kvmesh {

inline constexpr const char* kDefaultSecretEnv = "KVMESH_SECRET";

struct SecretSource {
  std::string value;
  std::string env;   // name of an environment variable
  std::string file;  // path
};

struct LoadedSecret {
  std::string secret;
  std::string origin;   // "config", "environment variable KVMESH_SECRET", "file /etc/kvmesh/secret"
  std::string warning;  // empty, or e.g. "secret file ... is readable by others (mode 0644)"
};

// kInvalidArgument: more than one source set, no source and no KVMESH_SECRET, an unset or empty
// variable, a secret shorter than 16 bytes; kNotFound / kIoError: the file cannot be read.
Result<LoadedSecret> LoadSecret(const SecretSource& source);

}  // namespace kvmesh
