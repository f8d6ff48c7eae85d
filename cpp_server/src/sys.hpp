// Checked system calls: a failure the loader cannot work around becomes an exception, which the
// run turns into an `internal` error event (PROTOCOL.md) instead of a crash or a silent misbehaviour.
#pragma once

#include <errno.h>

#include <string>
#include <system_error>

namespace netprof {

[[noreturn]] inline void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// `rc` when it is not negative; throws (with errno) otherwise.
inline int check_sys(int rc, const char* what) {
  if (rc < 0) throw_errno(what);
  return rc;
}

}  // namespace netprof
