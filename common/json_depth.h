// How deeply JSON text nests, counted without parsing it. The code that walks parsed JSON
// (nlohmann's copy, dump and comparison; the chat templates' Python rendering; the schema
// compiler) recurses once per level, so text nested deeper than a request can need is
// refused before it is parsed: a body of 8 MiB of '[' would otherwise overflow a thread's
// stack.
#ifndef KVFOLD_COMMON_JSON_DEPTH_H_
#define KVFOLD_COMMON_JSON_DEPTH_H_

#include <string_view>

#include "absl/status/status.h"

namespace kvfold {

// The most arrays and objects a request's JSON may open inside one another (protobuf's
// JSON parser stops at the same depth).
inline constexpr int kMaxJsonDepth = 100;

// Whether `text` opens at most `max_depth` arrays and objects inside one another;
// brackets inside strings do not count. Not a validity check: text that is not JSON may
// pass, and is the parser's to refuse.
bool JsonDepthWithin(std::string_view text, int max_depth = kMaxJsonDepth);

// OK when JsonDepthWithin(text); else InvalidArgument "<what> nests arrays and objects
// deeper than 100 levels".
absl::Status CheckJsonDepth(std::string_view text, std::string_view what);

}  // namespace kvfold

#endif  // KVFOLD_COMMON_JSON_DEPTH_H_
