// Python's json.dumps forms (python_json.h).
#include "inference_svc/tokenizer/python_json.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json_depth.h"

namespace kvfold {
namespace {

using ojson = nlohmann::ordered_json;

void AppendString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20) {
          absl::StrAppend(out, absl::StrFormat("\\u%04x", c));
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

void Append(const ojson& j, int indent, int level, std::string* out) {
  // Between items, and before the first and after the last when indented.
  auto newline = [&](int at) {
    out->push_back('\n');
    out->append(static_cast<size_t>(indent) * at, ' ');
  };
  const bool object = j.is_object();
  if ((object || j.is_array()) && !j.empty()) {
    out->push_back(object ? '{' : '[');
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out->push_back(',');
      if (indent >= 0) {
        newline(level + 1);
      } else if (!first) {
        out->push_back(' ');
      }
      first = false;
      if (object) {
        AppendString(it.key(), out);
        *out += ": ";
      }
      Append(*it, indent, level + 1, out);
    }
    if (indent >= 0) newline(level);
    out->push_back(object ? '}' : ']');
    return;
  }
  if (j.is_string()) {
    AppendString(j.get_ref<const std::string&>(), out);
    return;
  }
  // Empty containers, numbers (nlohmann and Python write the same shortest form), bools,
  // null.
  *out += j.dump();
}

}  // namespace

std::string PythonJsonText(const ojson& value, int indent) {
  std::string out;
  Append(value, indent, 0, &out);
  return out;
}

absl::StatusOr<std::string> PythonJsonOf(std::string_view json_text, int indent,
                                         std::string_view what) {
  // The rendering recurses per level.
  if (absl::Status s = CheckJsonDepth(json_text, what); !s.ok()) return s;
  const ojson value = ojson::parse(json_text.begin(), json_text.end(), nullptr,
                                   /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), " is not JSON text"));
  }
  return PythonJsonText(value, indent);
}

}  // namespace kvfold
