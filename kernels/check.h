// KVFOLD_CHECK: aborts with file:line on a violated programmer invariant (never for
// request-derived input; that returns InvalidArgument). Debian's Abseil has no absl/log.
#ifndef KVFOLD_KERNELS_CHECK_H_
#define KVFOLD_KERNELS_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define KVFOLD_CHECK(cond)                                                          \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)

#endif  // KVFOLD_KERNELS_CHECK_H_
