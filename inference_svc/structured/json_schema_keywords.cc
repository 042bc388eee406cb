#include "inference_svc/structured/json_schema_keywords.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace kvfold::structured::schema {

absl::Status Bad(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("schema at '", where.empty() ? "/" : where, "': ", what));
}

bool Leniency::Skip(const std::string& where, const std::string& keyword) {
  // Scopes are JSON pointers: "/a" holds "/a" and "/a/b", not "/ab".
  const auto in = [&](const LenientScope& scope) {
    return where.starts_with(scope.pointer) &&
           (where.size() == scope.pointer.size() || where[scope.pointer.size()] == '/');
  };
  const auto scope = std::find_if(scopes.begin(), scopes.end(), in);
  if (scope == scopes.end()) return false;
  if (++count_ <= kMaxSkipped) {
    const std::string inner = where.substr(scope->pointer.size());
    std::string named = absl::StrCat(keyword, " at '", inner.empty() ? "/" : inner, "'",
                                     scope->label.empty() ? "" : " in ", scope->label);
    if (named.size() > kMaxSkippedChars) {
      // Cut on a UTF-8 character's start.
      size_t cut = kMaxSkippedChars - 3;
      while (cut > 0 && (static_cast<uint8_t>(named[cut]) & 0xC0) == 0x80) --cut;
      named = absl::StrCat(named.substr(0, cut), "...");
    }
    skipped_.push_back(std::move(named));
  }
  return true;
}

std::vector<std::string> Leniency::Skipped() const {
  std::vector<std::string> out = skipped_;
  if (count_ > kMaxSkipped) out.push_back(absl::StrCat("and ", count_ - kMaxSkipped, " more"));
  return out;
}

const std::set<std::string>& Annotations() {
  static const std::set<std::string> k = {
      "title",         "description",   "default",         "examples",
      "$schema",       "$id",           "$comment",        "deprecated",
      "readOnly",      "writeOnly",     "format",          "$defs",
      "definitions",   "discriminator", "contentEncoding", "contentMediaType",
      "contentSchema", "nullable",      "example",         "externalDocs"};
  return k;
}

const std::set<std::string>& Assertions() {
  // clang-format off
  static const std::set<std::string> k = {
      "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref",                  // any value
      "properties", "required", "additionalProperties", "unevaluatedProperties",   // objects
      "items", "prefixItems", "additionalItems", "minItems", "maxItems",           // arrays
      "uniqueItems", "unevaluatedItems",
      "propertyNames", "minProperties", "maxProperties",                           // maps
      "minLength", "maxLength", "pattern",                                         // strings
      "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}; // numbers
  // clang-format on
  return k;
}

bool TypeMatches(const json& v, const std::string& type) {
  if (type == "string") return v.is_string();
  if (type == "number") return v.is_number();
  if (type == "integer") {
    return v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                     std::trunc(v.get<double>()) == v.get<double>());
  }
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  return false;
}

// The strings of a `format` whose values have a fixed shape; no pattern for any other
// format (an annotation, read past). Each shape is a subset of what the format's RFC
// admits, so every value written parses as one: a date's year is 1000 to 9999 (Python,
// among others, reads no year 0) and its day at most its month's length in a common year
// (February 29 is left out); a host name's labels are at most
// 22 characters (the RFC's 63 would take more positions than a pattern holds: a label
// is one position a character); an IPv6 address is written in full (eight groups, no
// `::`); an e-mail address is a dot-atom at a host name of two labels or more; a URI is
// http or https at a host name of labels of at most 20 characters, a port below 10000,
// then a path, a query and a fragment without percent-escapes, 1024 characters at most (a
// pattern's longest length bound: Pydantic's HttpUrl asks for 2083).
FormatShape FormatPattern(const std::string& format) {
  const std::string date =
      "[1-9]\\d{3}-((0[1-9]|1[0-2])-(0[1-9]|1\\d|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-"
      "31)";
  const std::string time =
      "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,6})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
  const std::string octet = "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
  const std::string label = "[A-Za-z0-9]([A-Za-z0-9-]{0,20}[A-Za-z0-9])?";
  const std::string hex = "[0-9a-fA-F]{1,4}";
  // RFC 3339 appendix A: years, months, days, then a time part; or a time part; or weeks.
  const std::string clock = "T(\\d+H(\\d+M(\\d+S)?)?|\\d+M(\\d+S)?|\\d+S)";
  if (format == "date") return {"^" + date + "$"};
  if (format == "time") return {"^" + time + "$"};
  if (format == "date-time") return {"^" + date + "T" + time + "$"};
  if (format == "uuid") {
    return {"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"};
  }
  if (format == "ipv4") return {"^" + octet + "(\\." + octet + "){3}$"};
  if (format == "ipv6") return {"^" + hex + "(:" + hex + "){7}$"};
  if (format == "hostname") return {"^" + label + "(\\." + label + ")*$", 253};
  if (format == "email") {
    return {"^[A-Za-z0-9_+-]+(\\.[A-Za-z0-9_+-]+)*@" + label + "(\\." + label + ")+$", 254};
  }
  if (format == "duration") {
    return {"^P((\\d+Y(\\d+M(\\d+D)?)?|\\d+M(\\d+D)?|\\d+D)(" + clock + ")?|" + clock + "|\\d+W)$"};
  }
  if (format == "uri") {
    // RFC 3986's characters of a path segment (unreserved, sub-delims, ':' and '@'; no
    // percent-escapes), '/' and '?' too in a query or fragment.
    const std::string segment = "[A-Za-z0-9._~!$&'()*+,;=:@-]";
    const std::string tail = "[A-Za-z0-9._~!$&'()*+,;=:@/?-]";
    const std::string host_label = "[A-Za-z0-9]([A-Za-z0-9-]{0,18}[A-Za-z0-9])?";
    return {"^https?://" + host_label + "(\\." + host_label + ")*(:[1-9]\\d{0,3})?(/" + segment +
                "*)*(\\?" + tail + "*)?(#" + tail + "*)?$",
            kMaxPatternLength};
  }
  return {};
}

std::set<nlohmann::json> ValuesOf(const Node& n) {
  std::set<nlohmann::json> values;
  for (const std::string& l : n.literals) values.insert(nlohmann::json::parse(l));
  return values;
}

void RangeIfLong(Node* n) {
  if (static_cast<int>(n->literals.size()) <= kMaxLiterals) return;
  std::sort(n->literals.begin(), n->literals.end());
  n->ranged = true;
}

absl::StatusOr<int> Count(const json& s, const char* key, const std::string& where, int fallback) {
  if (!s.contains(key)) return fallback;
  const json& v = s[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (1 << 20)) {
    return Bad(absl::StrCat(where, "/", key), "must be an integer in [0, 1048576]");
  }
  return static_cast<int>(v.get<int64_t>());
}

absl::Status Bounds(const json& s, const char* min_key, const char* max_key,
                    const std::string& where, int* min, int* max) {
  auto lo = Count(s, min_key, where, 0);
  if (!lo.ok()) return lo.status();
  auto hi = Count(s, max_key, where, -1);
  if (!hi.ok()) return hi.status();
  if (*hi >= 0 && *lo > *hi) {
    return Bad(where, absl::StrCat(min_key, " is above ", max_key));
  }
  *min = *lo;
  *max = *hi;
  return absl::OkStatus();
}

// minimum, maximum, exclusiveMinimum, exclusiveMaximum (a number, or as in draft 4 a
// boolean that makes minimum / maximum exclusive) into the bounds of number node *n:
// the tighter keyword at each end. An integer's bounds round inwards to integers; a
// number's must be integers (then a bound compares the written decimal exactly as it
// compares the double a parser reads of it, kMaxBoundedDigits digits at most). With
// `multipleOf` (a positive integer: a fraction's multiples are ones validators disagree
// on) the value is a multiple of it, written as an integer. Refused when no value of at
// most 15 digits lies between the bounds. A number's fractional bound and a fractional
// multipleOf are refused, or read past by a lenient *leniency.
absl::Status NumberBounds(const json& s, const std::string& where, Leniency* leniency, Node* n) {
  struct End {
    bool set = false;
    double value = 0;
    bool exclusive = false;
  };
  End lo, hi;
  struct Keyword {
    const char* key;
    bool lower, exclusive;
  };
  for (const Keyword& k :
       {Keyword{"minimum", true, false}, Keyword{"exclusiveMinimum", true, true},
        Keyword{"maximum", false, false}, Keyword{"exclusiveMaximum", false, true}}) {
    if (!s.contains(k.key)) continue;
    const json& v = s[k.key];
    const std::string at = absl::StrCat(where, "/", k.key);
    End& end = k.lower ? lo : hi;
    if (k.exclusive && v.is_boolean()) {  // draft 4: minimum / maximum comes first
      if (!end.set) {
        return Bad(at, absl::StrCat("a boolean needs '", k.lower ? "minimum" : "maximum", "'"));
      }
      end.exclusive = end.exclusive || v.get<bool>();
      continue;
    }
    if (!v.is_number() || !std::isfinite(v.get<double>())) {
      return Bad(at, "must be a finite number");
    }
    const double x = v.get<double>();
    if (n->kind == NodeKind::kNumber && std::trunc(x) != x) {
      if (leniency->Skip(where, k.key)) continue;
      return Bad(at, absl::StrCat("a bound of a 'number' must be an integer here (", v.dump(),
                                  "); an 'integer' takes any bound"));
    }
    if (!end.set || (k.lower ? x > end.value : x < end.value)) {
      end = End{true, x, k.exclusive};
    } else if (x == end.value) {
      end.exclusive = end.exclusive || k.exclusive;
    }
  }
  const double far = static_cast<double>(kMaxBoundMagnitude);
  int64_t multiple = 0;
  if (s.contains("multipleOf")) {
    const json& v = s["multipleOf"];
    const std::string at = absl::StrCat(where, "/multipleOf");
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0) {
      return Bad(at, "must be a number above 0");
    }
    const double x = v.get<double>();
    if (std::trunc(x) != x) {
      if (!leniency->Skip(where, "multipleOf")) {
        return Bad(at, absl::StrCat("must be an integer here (", v.dump(),
                                    "): validators divide by a fraction such as 0.01 in "
                                    "floating point and disagree on its multiples"));
      }
    } else {
      // Past the farthest bound only 0 is a multiple, as of kMaxBoundMagnitude + 1.
      multiple = x > far ? kMaxBoundMagnitude + 1 : static_cast<int64_t>(x);
    }
  }
  if (!lo.set && !hi.set && multiple == 0) return absl::OkStatus();
  n->bounded = true;
  n->min_value = -kMaxBoundMagnitude;
  n->max_value = kMaxBoundMagnitude;
  const bool integer = n->kind == NodeKind::kInteger;
  if (lo.set && lo.value >= -far) {
    // An integer above x: floor(x) + 1; at least x: ceil(x).
    const double v = std::min(
        integer ? (lo.exclusive ? std::floor(lo.value) + 1 : std::ceil(lo.value)) : lo.value,
        far + 1);
    n->min_value = static_cast<int64_t>(v);
    n->min_exclusive = !integer && lo.exclusive;
  }
  if (hi.set && hi.value <= far) {
    const double v = std::max(
        integer ? (hi.exclusive ? std::ceil(hi.value) - 1 : std::floor(hi.value)) : hi.value,
        -far - 1);
    n->max_value = static_cast<int64_t>(v);
    n->max_exclusive = !integer && hi.exclusive;
  }
  n->multiple_of = multiple;
  if (multiple != 0) {
    // Integers only: the multiples between the ends (each in or out as flagged).
    const int64_t from = n->min_value + (n->min_exclusive ? 1 : 0);
    const int64_t to = n->max_value - (n->max_exclusive ? 1 : 0);
    if (!MultipleWithin(std::max(from, -kMaxBoundMagnitude), std::min(to, kMaxBoundMagnitude),
                        multiple)) {
      return Bad(where, absl::StrCat("no multiple of ", multiple,
                                     " of at most 15 digits lies between the bounds"));
    }
    return absl::OkStatus();
  }
  const bool some = n->min_value < n->max_value ||
                    (n->min_value == n->max_value && !n->min_exclusive && !n->max_exclusive);
  if (!some || n->min_value > kMaxBoundMagnitude || n->max_value < -kMaxBoundMagnitude) {
    return Bad(where, "no value of at most 15 digits lies between the bounds");
  }
  return absl::OkStatus();
}

}  // namespace kvfold::structured::schema
