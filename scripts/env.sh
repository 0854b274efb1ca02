# shellcheck shell=bash
# Sourced by the scripts: common settings.
# nvcc is used when found; the toolkit's usual home is added to PATH if nvcc is not already there.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
KVMESH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KVMESH_JOBS=${KVMESH_JOBS:-$(nproc)}
export KVMESH_ROOT KVMESH_JOBS

# configure_and_build DIR [cmake args...]: configures (once) and builds everything in DIR.
configure_and_build() {
  local dir=$1
  shift
  cmake -S "$KVMESH_ROOT" -B "$dir" -G Ninja "$@" >"$dir.configure.log" 2>&1 || {
    cat "$dir.configure.log" >&2
    return 1
  }
  grep -E '^-- kvmesh' "$dir.configure.log" || true
  cmake --build "$dir" -j "$KVMESH_JOBS"
}
