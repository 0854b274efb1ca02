#include "common/clock.h"

namespace kvmesh {

SystemClock* SystemClock::Default() {
  static SystemClock clock;
  return &clock;
}

}  // namespace kvmesh
