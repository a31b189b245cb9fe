// FUZZ_CHECK: an invariant of the reader's API that a fuzz input must never break (aborts).
#ifndef XDL_TRACE_TESTS_FUZZ_FUZZ_CHECK_H_
#define XDL_TRACE_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(condition)                                                                \
  do {                                                                                       \
    if (!(condition)) {                                                                      \
      std::fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

#endif  // XDL_TRACE_TESTS_FUZZ_FUZZ_CHECK_H_
