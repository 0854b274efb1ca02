// Checks of internal invariants. A failed KVMESH_CHECK is a bug in kvmesh: it prints the condition,
// the place and the streamed message to stderr and aborts. Input from users, peers, files and
// configs is never checked this way: it becomes a Status at the boundary (see status.h).
//
//   KVMESH_CHECK(block < num_blocks_) << "block " << block;
//   KVMESH_CHECK_EQ(a, b);       KVMESH_DCHECK(cheap_invariant);   // DCHECK: debug builds only
//
// Host code only. Thread-safe.
#pragma once

#include <sstream>

namespace kvmesh::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  CheckFailure(const CheckFailure&) = delete;
  CheckFailure& operator=(const CheckFailure&) = delete;
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Makes `KVMESH_CHECK(c) << x` a void expression usable in both branches of a conditional.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace kvmesh::internal

#define KVMESH_CHECK(condition)                 \
  (condition) ? (void)0                         \
              : ::kvmesh::internal::Voidify() & \
                    ::kvmesh::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

#define KVMESH_CHECK_OP_(a, b, op) KVMESH_CHECK((a)op(b)) << "(" << (a) << " vs " << (b) << ") "
#define KVMESH_CHECK_EQ(a, b) KVMESH_CHECK_OP_(a, b, ==)
#define KVMESH_CHECK_NE(a, b) KVMESH_CHECK_OP_(a, b, !=)
#define KVMESH_CHECK_LT(a, b) KVMESH_CHECK_OP_(a, b, <)
#define KVMESH_CHECK_LE(a, b) KVMESH_CHECK_OP_(a, b, <=)
#define KVMESH_CHECK_GT(a, b) KVMESH_CHECK_OP_(a, b, >)
#define KVMESH_CHECK_GE(a, b) KVMESH_CHECK_OP_(a, b, >=)

#ifdef NDEBUG
#define KVMESH_DCHECK(condition) \
  while (false) KVMESH_CHECK(condition)
#else
#define KVMESH_DCHECK(condition) KVMESH_CHECK(condition)
#endif
