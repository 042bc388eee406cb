// JSON text as Python's json.dumps(value, ensure_ascii=False[, indent=N]) writes it: the
// `tojson` filter of Hugging Face chat templates, which show tools and tool-call
// arguments that way. Keys keep their order.
#ifndef KVFOLD_INFERENCE_SVC_TOKENIZER_PYTHON_JSON_H_
#define KVFOLD_INFERENCE_SVC_TOKENIZER_PYTHON_JSON_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace kvfold {

// indent < 0: one line, ", " and ": " separators. indent >= 0: one item per line,
// `indent` spaces per level, "," and ": " (empty objects and arrays stay "{}" / "[]").
// Strings: non-ASCII kept, `"` `\` and control characters escaped (\n \r \t \b \f, the
// others \u00XX).
std::string PythonJsonText(const nlohmann::ordered_json& value, int indent = -1);

// `json_text` parsed (keys in order) and written as above; InvalidArgument naming `what`
// when it is not JSON.
absl::StatusOr<std::string> PythonJsonOf(std::string_view json_text, int indent,
                                         std::string_view what);

}  // namespace kvfold

#endif  // KVFOLD_INFERENCE_SVC_TOKENIZER_PYTHON_JSON_H_
