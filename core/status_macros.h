// The status macros: propagate a non-OK absl::Status, or unwrap an absl::StatusOr, from a
// function that returns absl::Status or absl::StatusOr.
//
//   KVFOLD_RETURN_IF_ERROR(DoThing());
//   KVFOLD_ASSIGN_OR_RETURN(Widget w, MakeWidget());
#ifndef KVFOLD_CORE_STATUS_MACROS_H_
#define KVFOLD_CORE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KVFOLD_RETURN_IF_ERROR(expr)                              \
  do {                                                            \
    if (::absl::Status kvfold_status_ = (expr); !kvfold_status_.ok()) { \
      return kvfold_status_;                                      \
    }                                                             \
  } while (0)

#define KVFOLD_ASSIGN_OR_RETURN(lhs, expr) \
  KVFOLD_ASSIGN_OR_RETURN_IMPL_(KVFOLD_STATUS_CONCAT_(kvfold_statusor_, __LINE__), lhs, expr)

#define KVFOLD_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()

#define KVFOLD_STATUS_CONCAT_(a, b) KVFOLD_STATUS_CONCAT_INNER_(a, b)
#define KVFOLD_STATUS_CONCAT_INNER_(a, b) a##b

#endif  // KVFOLD_CORE_STATUS_MACROS_H_
