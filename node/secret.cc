#include "node/secret.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/strings.h"
#include "node/auth.h"

namespace kvmesh {
namespace {

Result<LoadedSecret> FromEnv(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr || *v == '\0') {
    return Status::InvalidArgument(
        StrCat("no secret: the environment variable ", name, " is not set or empty"));
  }
  return LoadedSecret{v, StrCat("environment variable ", name), ""};
}

Result<LoadedSecret> FromFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    const std::string what = StrCat("secret file ", path, ": ", std::strerror(err));
    return err == ENOENT ? Status::NotFound(what) : Status::IoError(what);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IoError(StrCat("secret file ", path, ": cannot be opened"));
  std::ostringstream text;
  text << in.rdbuf();
  std::string secret = text.str();
  if (!secret.empty() && secret.back() == '\n') secret.pop_back();
  if (!secret.empty() && secret.back() == '\r') secret.pop_back();
  LoadedSecret out{std::move(secret), StrCat("file ", path), ""};
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    out.warning =
        StrCat("secret file ", path, " is accessible by group or others (mode 0",
               std::to_string((st.st_mode >> 6) & 7), std::to_string((st.st_mode >> 3) & 7),
               std::to_string(st.st_mode & 7), "); chmod 600 it");
  }
  return out;
}

}  // namespace

Result<LoadedSecret> LoadSecret(const SecretSource& source) {
  const int set = static_cast<int>(!source.value.empty()) + static_cast<int>(!source.env.empty()) +
                  static_cast<int>(!source.file.empty());
  if (set > 1) {
    return Status::InvalidArgument(
        "give the secret in one way only: a value, an environment "
        "variable or a file");
  }
  Result<LoadedSecret> loaded = Status::Internal("unreachable");
  if (!source.value.empty()) {
    loaded = LoadedSecret{source.value, source.value_origin, ""};
  } else if (!source.env.empty()) {
    loaded = FromEnv(source.env);
  } else if (!source.file.empty()) {
    loaded = FromFile(source.file);
  } else {
    loaded = FromEnv(kDefaultSecretEnv);
    if (!loaded.ok()) {
      // Nothing was configured: say how to give one (the node and its clients share it).
      return Status::InvalidArgument(StrCat(
          loaded.status().message(),
          ". Every node and client of a deployment shares one secret of at least ", kMinSecretBytes,
          " bytes: export ", kDefaultSecretEnv,
          "=$(openssl rand -hex 32), or name a file (kvnode: control.secret_file; kvctl and "
          "kvmesh-synth: --secret-file) or another variable (control.secret_env, --secret-env)"));
    }
  }
  if (!loaded.ok()) return loaded;
  if (loaded->secret.size() < kMinSecretBytes) {
    return Status::InvalidArgument(StrCat("the secret from ", loaded->origin, " has ",
                                          loaded->secret.size(), " bytes; at least ",
                                          kMinSecretBytes, " are required"));
  }
  return loaded;
}

}  // namespace kvmesh
