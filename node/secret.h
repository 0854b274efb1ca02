// The control plane's shared secret: where it comes from and what is accepted.
//
// Exactly one source is used, in this order of precedence of what is set: the value itself, an
// environment variable's name, a file's path (its content with one trailing newline removed); when
// none is set, the environment variable KVMESH_SECRET. The secret must be at least
// kMinSecretBytes (16) bytes. A secret file readable by group or others is accepted with a warning
// returned in `warning` (the caller logs it).
//
// A running node's secrets can be replaced (kvnode re-reads them on SIGHUP: docs/kvnode.md,
// "Rotating the secret"): PresentedSecret holds the one it presents to its peers.
//
// Thread safety: LoadSecret reads the environment and the file system, otherwise pure;
// PresentedSecret is thread-safe.
#pragma once

#include <string>

#include "common/result.h"
#include "common/thread_annotations.h"

namespace kvmesh {

inline constexpr const char* kDefaultSecretEnv = "KVMESH_SECRET";

struct SecretSource {
  std::string value;
  std::string env;                      // name of an environment variable
  std::string file;                     // path
  std::string value_origin = "config";  // where `value` was given (LoadedSecret::origin)
};

struct LoadedSecret {
  std::string secret;
  std::string origin;   // "config", "environment variable KVMESH_SECRET", "file /etc/kvmesh/secret"
  std::string warning;  // empty, or e.g. "secret file ... is readable by others (mode 0644)"
};

// kInvalidArgument: more than one source set, no source and no KVMESH_SECRET, an unset or empty
// variable, a secret shorter than 16 bytes; kNotFound / kIoError: the file cannot be read.
Result<LoadedSecret> LoadSecret(const SecretSource& source);

// The secret a node presents when it connects to its peers (peer sessions, directory updates):
// read at each new connection, replaced when the node reloads its secrets.
class PresentedSecret {
 public:
  explicit PresentedSecret(std::string secret) : secret_(std::move(secret)) {}
  [[nodiscard]] std::string Get() const KVMESH_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return secret_;
  }
  void Set(std::string secret) KVMESH_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    secret_ = std::move(secret);
  }

 private:
  mutable Mutex mu_;
  std::string secret_ KVMESH_GUARDED_BY(mu_);
};

}  // namespace kvmesh
