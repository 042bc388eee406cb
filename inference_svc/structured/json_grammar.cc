#include "inference_svc/structured/json_grammar.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "core/status_macros.h"
#include "inference_svc/structured/json_schema_keywords.h"
#include "nlohmann/json.hpp"

namespace kvfold::structured {
namespace {

using schema::Annotations;
using schema::Assertions;
using schema::Bad;
using schema::Bounds;
using schema::FormatPattern;
using schema::FormatShape;
using schema::json;
using schema::RangeIfLong;
using schema::TypeMatches;
using schema::ValuesOf;

}  // namespace

Grammar::Grammar() {
  nodes_.resize(6);
  nodes_[kAnyValue].kind = NodeKind::kAny;
  nodes_[kAnyObject].kind = NodeKind::kObject;
  nodes_[kAnyObject].free_keys = true;
  nodes_[kAnyObject].values = kAnyValue;
  nodes_[kAnyArray].kind = NodeKind::kArray;
  nodes_[kAnyArray].items = kAnyValue;
  nodes_[kAnyLiteral].kind = NodeKind::kLiterals;
  nodes_[kAnyLiteral].literals = {"true", "false", "null"};
  nodes_[kAnyString].kind = NodeKind::kString;
  nodes_[kAnyNumber].kind = NodeKind::kNumber;
}

std::shared_ptr<const Grammar> Grammar::JsonObject(bool compact) {
  auto make = [](bool compact) {
    auto grammar = std::shared_ptr<Grammar>(new Grammar());
    grammar->root_ = kAnyObject;
    grammar->compact_ = compact;
    return std::shared_ptr<const Grammar>(std::move(grammar));
  };
  static const std::shared_ptr<const Grammar> compact_object = make(true);
  static const std::shared_ptr<const Grammar> object = make(false);
  return compact ? compact_object : object;
}

// Compiles one schema document into a Grammar, node by node; $ref targets once each (so
// recursive schemas become cycles in the graph, bounded at match time by kMaxDepth).
class SchemaCompiler {
 public:
  SchemaCompiler(const json& root, bool compact, std::vector<LenientScope> lenient_scopes)
      : root_(root), grammar_(new Grammar()) {
    grammar_->compact_ = compact;
    leniency_.scopes = std::move(lenient_scopes);
  }

  absl::StatusOr<std::shared_ptr<const Grammar>> Run() {
    auto root = Compile(root_, "", 0);
    if (!root.ok()) return root.status();
    grammar_->root_ = *root;
    KVFOLD_RETURN_IF_ERROR(BoundedAlternatives());
    grammar_->skipped_ = leniency_.Skipped();
    return std::shared_ptr<const Grammar>(std::move(grammar_));
  }

 private:
  int Add(Node node) {
    grammar_->nodes_.push_back(std::move(node));
    return static_cast<int>(grammar_->nodes_.size()) - 1;
  }

  // `unevaluatedProperties` / `unevaluatedItems` where no in-place applicator evaluates
  // anything beside the schema's own keywords: what they constrain is what
  // `additionalProperties` / the items past the listed places would, so s with them in
  // those keywords' place (or dropped where those keywords are given: nothing is left
  // unevaluated). Leniently, beside an applicator, they are read past.
  absl::StatusOr<json> WithoutUnevaluated(const json& s, const std::string& where) {
    for (const char* applicator :
         {"allOf", "anyOf", "oneOf", "$ref", "not", "if", "then", "else", "dependentSchemas"}) {
      if (!s.contains(applicator)) continue;
      if (leniency_.Skip(where, absl::StrCat("unevaluatedProperties / unevaluatedItems beside ",
                                             applicator))) {
        json out = s;
        out.erase("unevaluatedProperties");
        out.erase("unevaluatedItems");
        return out;
      }
      return Bad(where, absl::StrCat("'unevaluatedProperties' / 'unevaluatedItems' beside '",
                                     applicator, "' is not supported"));
    }
    json out = s;
    if (s.contains("unevaluatedProperties")) {
      if (!s.contains("additionalProperties")) {
        out["additionalProperties"] = s["unevaluatedProperties"];
      }
      out.erase("unevaluatedProperties");
    }
    if (s.contains("unevaluatedItems")) {
      const bool list = s.contains("items") && s["items"].is_array();  // Draft 7's tuples
      const char* rest = list ? "additionalItems" : "items";
      if (!s.contains(rest)) out[rest] = s["unevaluatedItems"];
      out.erase("unevaluatedItems");
    }
    return out;
  }

  absl::StatusOr<int> Compile(const json& s, const std::string& where, int depth) {
    if (depth > 64) return Bad(where, "schemas nested more than 64 deep");
    if (s.is_boolean()) {
      if (s.get<bool>()) return Grammar::kAnyValue;
      return Bad(where, "the schema 'false' admits no value");
    }
    if (!s.is_object()) return Bad(where, "a schema must be an object or a boolean");
    if (s.contains("unevaluatedProperties") || s.contains("unevaluatedItems")) {
      auto plain = WithoutUnevaluated(s, where);
      if (!plain.ok()) return plain.status();
      return Compile(*plain, where, depth);
    }
    std::vector<std::string> assertions;
    for (const auto& [key, value] : s.items()) {
      if (Annotations().count(key)) continue;
      if (!Assertions().count(key)) {
        if (leniency_.Skip(where, key)) continue;
        return Bad(where, absl::StrCat("keyword '", key,
                                       "' is not supported (docs/structured-output.md)"));
      }
      assertions.push_back(key);
    }
    auto only = [&](const std::string& key) -> absl::Status {
      for (const std::string& a : assertions) {
        if (a != key && !leniency_.Skip(where, absl::StrCat(a, " beside ", key))) {
          return Bad(where, absl::StrCat("'", key, "' cannot be combined with '", a, "'"));
        }
      }
      return absl::OkStatus();
    };
    if (s.contains("$ref")) {
      KVFOLD_RETURN_IF_ERROR(only("$ref"));
      return Ref(s["$ref"], where, depth);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      KVFOLD_RETURN_IF_ERROR(only(key));
      const json& list = s[key];
      const std::string at = absl::StrCat(where, "/", key);
      if (!list.is_array() || list.empty()) return Bad(at, "must be a non-empty array");
      Node node;
      node.kind = NodeKind::kAnyOf;
      for (size_t i = 0; i < list.size(); ++i) {
        auto alt = Compile(list[i], absl::StrCat(at, "/", i), depth + 1);
        if (!alt.ok()) return alt.status();
        node.alternatives.push_back(*alt);
      }
      if (std::string_view(key) == "oneOf") {
        // Leniently, alternatives that may overlap are held as anyOf's.
        if (absl::Status disjoint = Disjoint(node.alternatives, at);
            !disjoint.ok() && !leniency_.Skip(where, "oneOf (held as anyOf)")) {
          return disjoint;
        }
      }
      return Add(std::move(node));
    }
    if (s.contains("allOf")) {
      KVFOLD_RETURN_IF_ERROR(only("allOf"));
      const json& list = s["allOf"];
      if (!list.is_array() || list.empty())
        return Bad(absl::StrCat(where, "/allOf"), "must be a non-empty array");
      if (list.size() != 1 && !leniency_.Skip(where, "allOf after its first schema")) {
        return Bad(absl::StrCat(where, "/allOf"), "only an allOf of one schema is supported");
      }
      return Compile(list[0], absl::StrCat(where, "/allOf/0"), depth + 1);
    }

    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const json& e : t) {
          if (!e.is_string()) return Bad(absl::StrCat(where, "/type"), "types must be strings");
          types.push_back(e.get<std::string>());
        }
      } else {
        return Bad(absl::StrCat(where, "/type"), "must be a type name or a list of them");
      }
      for (const std::string& t : types) {
        if (t != "string" && t != "number" && t != "integer" && t != "boolean" && t != "null" &&
            t != "object" && t != "array") {
          return Bad(absl::StrCat(where, "/type"), absl::StrCat("unknown type '", t, "'"));
        }
      }
    }

    if (s.contains("enum") || s.contains("const")) {
      for (const std::string& a : assertions) {
        if (a != "enum" && a != "const" && a != "type" &&
            !leniency_.Skip(where, absl::StrCat(a, " beside enum / const"))) {
          return Bad(where, absl::StrCat("'enum' / 'const' cannot be combined with '", a, "'"));
        }
      }
      std::vector<json> values;
      if (s.contains("enum")) {
        if (!s["enum"].is_array() || s["enum"].empty()) {
          return Bad(absl::StrCat(where, "/enum"), "must be a non-empty array");
        }
        values.assign(s["enum"].begin(), s["enum"].end());
      }
      if (s.contains("const")) {
        // Both: the const, when the enum has it.
        if (!values.empty() &&
            std::find(values.begin(), values.end(), s["const"]) == values.end()) {
          values.clear();
        } else {
          values = {s["const"]};
        }
      }
      Node node;
      node.kind = NodeKind::kLiterals;
      std::set<std::string> seen;
      for (const json& v : values) {
        const bool typed =
            types.empty() || std::any_of(types.begin(), types.end(),
                                         [&](const std::string& t) { return TypeMatches(v, t); });
        std::string text = v.dump();
        if (typed && seen.insert(text).second) node.literals.push_back(std::move(text));
      }
      if (node.literals.empty()) {
        return Bad(where, "no value of 'enum' / 'const' fits 'type' (and each other)");
      }
      if (static_cast<int>(node.literals.size()) > kMaxValues) {
        return Bad(absl::StrCat(where, "/enum"),
                   absl::StrCat(node.literals.size(), " values; at most ", kMaxValues));
      }
      RangeIfLong(&node);
      return Add(std::move(node));
    }

    if (types.empty()) {
      // No type: the keywords present say which kind of value to write (any value of the
      // other kinds would also be valid; writing the constrained kind is more useful).
      auto has = [&](std::initializer_list<const char*> keys) {
        return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return s.contains(k); });
      };
      if (has({"properties", "required", "additionalProperties", "propertyNames", "minProperties",
               "maxProperties"})) {
        types.push_back("object");
      }
      if (has({"items", "minItems", "maxItems", "prefixItems", "additionalItems", "uniqueItems"})) {
        types.push_back("array");
      }
      // A format held to a shape (FormatPattern) names strings; another one (OpenAPI's
      // "int64", say) annotates and names nothing.
      const bool shaped = s.contains("format") && s["format"].is_string() &&
                          !FormatPattern(s["format"].get<std::string>()).pattern.empty();
      if (has({"minLength", "maxLength", "pattern"}) || shaped) types.push_back("string");
      if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})) {
        types.push_back("number");
      }
      if (types.empty()) return Grammar::kAnyValue;
    }
    std::vector<int> nodes;
    bool number_done = false;
    for (const std::string& t : types) {
      absl::StatusOr<int> node;
      if (t == "number" || t == "integer") {
        // "number" admits every integer: with both, one number node.
        if (number_done) continue;
        const bool number = std::find(types.begin(), types.end(), "number") != types.end();
        Node n;
        n.kind = number ? NodeKind::kNumber : NodeKind::kInteger;
        KVFOLD_RETURN_IF_ERROR(schema::NumberBounds(s, where, &leniency_, &n));
        node = Add(std::move(n));
        number_done = true;
      } else if (t == "boolean" || t == "null") {
        Node n;
        n.kind = NodeKind::kLiterals;
        n.literals = t == "null" ? std::vector<std::string>{"null"}
                                 : std::vector<std::string>{"true", "false"};
        node = Add(std::move(n));
      } else if (t == "string") {
        node = String(s, where);
      } else if (t == "array") {
        node = Array(s, where, depth);
      } else {
        node = Object(s, where, depth);
      }
      if (!node.ok()) return node.status();
      nodes.push_back(*node);
    }
    if (nodes.size() == 1) return nodes[0];
    Node any;
    any.kind = NodeKind::kAnyOf;
    any.alternatives = std::move(nodes);
    return Add(std::move(any));
  }

  absl::StatusOr<int> Ref(const json& ref, const std::string& where, int depth) {
    if (!ref.is_string() || ref.get<std::string>().empty() || ref.get<std::string>()[0] != '#') {
      return Bad(absl::StrCat(where, "/$ref"),
                 "only references into this schema ('#' or '#/...') are supported");
    }
    const std::string pointer = ref.get<std::string>().substr(1);
    if (auto it = refs_.find(pointer); it != refs_.end()) return it->second;
    const json* target = nullptr;
    try {
      target = &root_.at(json::json_pointer(pointer));
    } catch (const json::exception&) {
      return Bad(absl::StrCat(where, "/$ref"),
                 absl::StrCat("'", ref.get<std::string>(), "' names nothing in the schema"));
    }
    // The target's node is reserved first, so a reference inside it comes back here.
    const int slot = Add(Node{});
    refs_[pointer] = slot;
    unfilled_.insert(slot);
    auto compiled = Compile(*target, pointer, depth + 1);
    if (!compiled.ok()) return compiled.status();
    // The target is itself a reference to a slot still being compiled (this one, or one
    // that leads back here): references all the way round, no schema in between.
    if (unfilled_.count(*compiled)) {
      return Bad(absl::StrCat(where, "/$ref"), "references lead back to themselves");
    }
    grammar_->nodes_[slot] = grammar_->nodes_[*compiled];
    unfilled_.erase(slot);
    return slot;
  }

  // How many alternatives a value of each anyOf node opens at once (anyOf within anyOf
  // counted out): refused when an anyOf leads back to itself with no object or array in
  // between (a value of it would open alternatives forever), or when one opens more than
  // kMaxAlternatives.
  absl::Status BoundedAlternatives() {
    const std::vector<Node>& nodes = grammar_->nodes_;
    std::vector<int64_t> opens(nodes.size(), -1);  // -1: not counted; -2: being counted
    std::function<absl::StatusOr<int64_t>(int)> count = [&](int i) -> absl::StatusOr<int64_t> {
      if (nodes[i].kind != NodeKind::kAnyOf) return 1;
      if (opens[i] == -2) {
        return absl::InvalidArgumentError(
            "schema: an anyOf / oneOf / type list leads back to itself with no object or "
            "array in between");
      }
      if (opens[i] >= 0) return opens[i];
      opens[i] = -2;
      int64_t total = 0;
      for (int alt : nodes[i].alternatives) {
        auto n = count(alt);
        if (!n.ok()) return n.status();
        total = std::min<int64_t>(total + *n, int64_t{1} << 40);
      }
      opens[i] = total;
      return total;
    };
    for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
      auto n = count(i);
      if (!n.ok()) return n.status();
      if (*n > kMaxAlternatives) {
        return absl::InvalidArgumentError(
            absl::StrCat("schema: one value may be any of ", *n,
                         " alternatives (anyOf within anyOf); at most ", kMaxAlternatives));
      }
    }
    return absl::OkStatus();
  }

  // oneOf admits a document that exactly one alternative admits. Alternatives of
  // different first bytes (an object and a string, a number and null) never both admit a
  // document, nor do lists of values no two of which share a value (`const`s, `enum`s:
  // a form's labelled choices), nor objects told apart by a discriminating property
  // (Discriminated); anything else is refused rather than risk a document two admit.
  absl::Status Disjoint(const std::vector<int>& alternatives, const std::string& where) {
    if (static_cast<int>(alternatives.size()) > kMaxAlternatives) {
      return Bad(where, absl::StrCat("oneOf of ", alternatives.size(), " alternatives; at most ",
                                     kMaxAlternatives));
    }
    const absl::Status overlap =
        Bad(where, "oneOf alternatives may admit the same document; use anyOf");
    std::set<char> starts, literal_starts;
    std::vector<int> objects;
    std::set<nlohmann::json> values;  // of the lists of values (ValuesOf)
    for (int alt : alternatives) {
      std::string first;
      if (!FirstBytes(alt, &first, 0)) {
        return Bad(where,
                   "oneOf alternatives must start with different characters ({, [, \", "
                   "a digit, a literal) or be objects with a discriminating property; use "
                   "anyOf");
      }
      const Node* n = unfilled_.count(alt) ? nullptr : &grammar_->nodes_[alt];
      if (n != nullptr && n->kind == NodeKind::kObject) {
        objects.push_back(alt);
        continue;
      }
      if (n != nullptr && n->kind == NodeKind::kLiterals) {
        for (const nlohmann::json& v : ValuesOf(*n)) {
          if (!values.insert(v).second) return overlap;
        }
        literal_starts.insert(first.begin(), first.end());
        continue;
      }
      for (char c : std::set<char>(first.begin(), first.end())) {
        if (!starts.insert(c).second) return overlap;
      }
    }
    if (!objects.empty() && !starts.insert('{').second) return overlap;
    for (char c : literal_starts) {
      if (starts.count(c)) return overlap;
    }
    return objects.size() > 1 ? Discriminated(objects, where) : absl::OkStatus();
  }

  // Objects of a oneOf: told apart when one property (Pydantic's discriminator) is
  // required by every one and listed values (`const` / `enum`) no two of them share. A
  // document of one carries its own value there, which every other refuses.
  absl::Status Discriminated(const std::vector<int>& objects, const std::string& where) {
    // The value node of required property `key` of object node `index` when it lists
    // values; -1 otherwise.
    auto listed = [&](int index, const std::string& key) {
      for (const Property& p : grammar_->nodes_[index].properties) {
        if (p.key != key) continue;
        const bool values = p.required && !unfilled_.count(p.value) &&
                            grammar_->nodes_[p.value].kind == NodeKind::kLiterals;
        return values ? p.value : -1;
      }
      return -1;
    };
    // A value node's values (ValuesOf), read once: objects may share nodes through $ref.
    std::map<int, std::set<nlohmann::json>> read;
    int64_t compared = 0;  // bounded: a small schema of shared $refs could ask for billions
    for (const Property& candidate : grammar_->nodes_[objects[0]].properties) {
      std::set<int> nodes;  // a node two objects list shares its values with itself
      bool apart = true;
      for (int o : objects) {
        const int node = listed(o, candidate.key);
        if (node < 0 || !nodes.insert(node).second) {
          apart = false;
          break;
        }
      }
      std::set<nlohmann::json> seen;
      for (auto it = nodes.begin(); apart && it != nodes.end(); ++it) {
        auto [values, fresh] = read.try_emplace(*it);
        if (fresh) values->second = ValuesOf(grammar_->nodes_[*it]);
        compared += static_cast<int64_t>(values->second.size());
        if (compared > kMaxDiscriminatorValues) {
          return Bad(where, absl::StrCat("oneOf: more than ", kMaxDiscriminatorValues,
                                         " values to compare to tell its objects apart"));
        }
        for (const nlohmann::json& v : values->second) apart = apart && seen.insert(v).second;
      }
      if (apart) return absl::OkStatus();
    }
    return Bad(where,
               "oneOf alternatives that are objects need a property every one requires, "
               "with 'const' / 'enum' values no two of them share (a discriminator); use "
               "anyOf");
  }

  // The bytes a value of `node` can start with; false when that is not known.
  bool FirstBytes(int index, std::string* out, int depth) const {
    if (depth > 16) return false;
    const Node& n = grammar_->nodes_[index];
    switch (n.kind) {
      case NodeKind::kAny:
        return false;
      case NodeKind::kObject:
        *out += '{';
        return true;
      case NodeKind::kArray:
        *out += '[';
        return true;
      case NodeKind::kString:
        *out += '"';
        return true;
      case NodeKind::kNumber:
      case NodeKind::kInteger:
        *out += "-0123456789";
        return true;
      case NodeKind::kLiterals: {
        std::set<char> firsts;
        for (const std::string& l : n.literals) firsts.insert(l[0]);
        out->append(firsts.begin(), firsts.end());
        return true;
      }
      case NodeKind::kAnyOf:
        for (int alt : n.alternatives) {
          if (!FirstBytes(alt, out, depth + 1)) return false;
        }
        return true;
    }
    return false;
  }

  absl::StatusOr<int> String(const json& s, const std::string& where) {
    Node n;
    n.kind = NodeKind::kString;
    KVFOLD_RETURN_IF_ERROR(
        Bounds(s, "minLength", "maxLength", where, &n.min_length, &n.max_length));
    // A pattern, or for a format with a fixed shape its pattern, and the most characters
    // it is held to (a format's shape may lower maxLength).
    std::string source;
    int max_length = n.max_length;
    std::string at = absl::StrCat(where, "/pattern");
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) return Bad(at, "must be a string");
      source = s["pattern"].get<std::string>();
    } else if (s.contains("format") && s["format"].is_string()) {
      const FormatShape shape = FormatPattern(s["format"].get<std::string>());
      at = absl::StrCat(where, "/format");
      int held = n.max_length;
      if (shape.max_length >= 0) {
        held = held < 0 ? shape.max_length : std::min(held, shape.max_length);
      }
      if (held >= 0 && n.min_length > held) {
        // Leniently, the string is held to its own lengths.
        if (!leniency_.Skip(where, "format")) {
          return Bad(where, absl::StrCat("minLength is above the format's most characters (",
                                         shape.max_length, ")"));
        }
      } else {
        source = shape.pattern;
        max_length = held;
      }
    }
    if (!source.empty()) {
      auto pattern = Pattern::Compile(source, n.min_length, max_length);
      if (!pattern.ok()) {
        // Leniently, the string is held to its own lengths alone.
        if (leniency_.Skip(where, s.contains("pattern") ? "pattern" : "format")) {
          return Add(std::move(n));
        }
        return Bad(at, std::string(pattern.status().message()));
      }
      // The schema's patterns are bounded together: a schema of many short patterns would
      // otherwise ask for hundreds of times its size.
      pattern_bytes_ += pattern->MemoryBytes();
      if (pattern_bytes_ > kMaxSchemaPatternBytes) {
        return Bad(where,
                   absl::StrCat("the schema's patterns and formats take more than ",
                                kMaxSchemaPatternBytes >> 20, " MiB compiled; not supported"));
      }
      n.max_length = max_length;
      n.pattern = std::make_shared<const Pattern>(std::move(*pattern));
    }
    return Add(std::move(n));
  }

  // An array: its places (prefixItems, or `items` as a list in drafts 4-2019) and the
  // schema of every later item (`items` after prefixItems, `additionalItems` after a
  // list; `false`: no later item), then minItems / maxItems.
  absl::StatusOr<int> Array(const json& s, const std::string& where, int depth) {
    Node n;
    n.kind = NodeKind::kArray;
    n.items = Grammar::kAnyValue;
    const bool list = s.contains("items") && s["items"].is_array();
    if (s.contains("prefixItems") && list) {
      return Bad(where, "'prefixItems' and an 'items' list cannot be combined");
    }
    const char* places = list ? "items" : "prefixItems";
    const char* rest = list ? "additionalItems" : "items";
    if (s.contains(places)) {
      const json& p = s[places];
      if (!p.is_array())
        return Bad(absl::StrCat(where, "/", places), "must be an array of schemas");
      if (p.size() > static_cast<size_t>(kMaxProperties)) {
        return Bad(absl::StrCat(where, "/", places),
                   absl::StrCat(p.size(), " places; at most ", kMaxProperties));
      }
      for (size_t i = 0; i < p.size(); ++i) {
        auto item = Compile(p[i], absl::StrCat(where, "/", places, "/", i), depth + 1);
        if (!item.ok()) return item.status();
        n.prefix_items.push_back(*item);
      }
    }
    if (!list && s.contains("additionalItems")) {
      return Bad(absl::StrCat(where, "/additionalItems"), "goes with 'items' as a list");
    }
    KVFOLD_RETURN_IF_ERROR(Bounds(s, "minItems", "maxItems", where, &n.min_items, &n.max_items));
    if (s.contains(rest)) {
      if (s[rest].is_boolean() && !s[rest].get<bool>()) {
        const int places_count = static_cast<int>(n.prefix_items.size());
        n.max_items = n.max_items < 0 ? places_count : std::min(n.max_items, places_count);
        if (n.min_items > n.max_items) {
          return Bad(where, "minItems is above the places with no later item");
        }
      } else {
        auto items = Compile(s[rest], absl::StrCat(where, "/", rest), depth + 1);
        if (!items.ok()) return items.status();
        n.items = *items;
      }
    }
    if (s.contains("uniqueItems")) {
      const std::string at = absl::StrCat(where, "/uniqueItems");
      if (!s["uniqueItems"].is_boolean()) return Bad(at, "must be a boolean");
      if (s["uniqueItems"].get<bool>()) {
        Node held = n;
        if (absl::Status unique = UniqueItems(where, &held); unique.ok()) {
          n = std::move(held);
        } else if (!leniency_.Skip(where, "uniqueItems")) {
          return unique;
        }
      }
    }
    return Add(std::move(n));
  }

  // uniqueItems of array node *n: held where every item is one of a list of values
  // (`enum`, `const`, `boolean`, `null`), each then written at most once, or a string
  // without a pattern, or an integer without multiples (the matcher keeps a hash of each
  // string, the value of each integer written, json_matcher.cc); a matcher cannot compare
  // items of other kinds
  // as they stream (a number's 1 and 1.0 are one value), so those are refused.
  absl::Status UniqueItems(const std::string& where, Node* n) {
    const std::string at = absl::StrCat(where, "/uniqueItems");
    if (n->max_items == 0) return absl::OkStatus();  // no item at all
    if (!n->prefix_items.empty()) return Bad(at, "is not supported beside tuple places");
    const bool known = unfilled_.count(n->items) == 0;
    const Node* items = known ? &grammar_->nodes_[n->items] : nullptr;
    // Integers without multiples: no two texts of one value but 0 and -0, which the
    // matcher reads as one; between bounds, at most as many items as values.
    if (items != nullptr && items->kind == NodeKind::kInteger && items->multiple_of == 0) {
      if (items->bounded) {
        const int64_t count = std::min(items->max_value, kMaxBoundMagnitude) -
                              std::max(items->min_value, -kMaxBoundMagnitude) + 1;
        if (n->min_items > count) {
          return Bad(where, absl::StrCat("minItems is above the ", count,
                                         " distinct values of the items"));
        }
        if (count <= std::numeric_limits<int>::max()) {
          n->max_items =
              n->max_items < 0 ? static_cast<int>(count) : std::min<int64_t>(n->max_items, count);
        }
      }
      n->unique_items = true;
      return absl::OkStatus();
    }
    if (items != nullptr && items->kind == NodeKind::kString && items->pattern == nullptr) {
      // Strings of at least one character are more than any answer writes; of none,
      // there is one.
      if (grammar_->nodes_[n->items].max_length == 0) {
        if (n->min_items > 1)
          return Bad(where, "minItems is above the 1 distinct value of the items");
        n->max_items = n->max_items < 0 ? 1 : std::min(n->max_items, 1);
      }
      n->unique_items = true;
      return absl::OkStatus();
    }
    if (!known || grammar_->nodes_[n->items].kind != NodeKind::kLiterals ||
        grammar_->nodes_[n->items].ranged) {
      return Bad(at, absl::StrCat("is supported where the items are at most ", kMaxLiterals,
                                  " 'enum' / 'const' values, booleans or null (each written "
                                  "at most once), strings without a pattern or format, or "
                                  "integers without multipleOf; not for items of other "
                                  "kinds"));
    }
    const std::vector<std::string>& literals = grammar_->nodes_[n->items].literals;
    // JSON Schema compares values, not texts: 1 and 1.0, or {"a":1,"b":2} and
    // {"b":2,"a":1}, are one value, which the matcher would write twice.
    std::vector<nlohmann::json> values;
    for (const std::string& l : literals) {
      const nlohmann::json v = nlohmann::json::parse(l);
      for (size_t j = 0; j < values.size(); ++j) {
        if (values[j] == v) {
          return Bad(at, absl::StrCat("the items' values ", literals[j], " and ", l,
                                      " are one value to JSON Schema"));
        }
      }
      values.push_back(v);
    }
    const int count = static_cast<int>(literals.size());
    if (n->min_items > count) {
      return Bad(where,
                 absl::StrCat("minItems is above the ", count, " distinct values of the items"));
    }
    n->max_items = n->max_items < 0 ? count : std::min(n->max_items, count);
    n->unique_items = true;
    return absl::OkStatus();
  }

  absl::StatusOr<int> Object(const json& s, const std::string& where, int depth) {
    Node n;
    n.kind = NodeKind::kObject;
    std::set<std::string> required;
    if (s.contains("required")) {
      const json& r = s["required"];
      if (!r.is_array()) return Bad(absl::StrCat(where, "/required"), "must be an array");
      for (const json& name : r) {
        if (!name.is_string()) {
          return Bad(absl::StrCat(where, "/required"), "must list property names");
        }
        required.insert(name.get<std::string>());
      }
    }
    const json* props = s.contains("properties") ? &s["properties"] : nullptr;
    if (props != nullptr && !props->is_object()) {
      return Bad(absl::StrCat(where, "/properties"), "must be an object");
    }
    if (props == nullptr || props->empty()) {
      // No listed properties: any keys, each value of additionalProperties (absent or
      // true: any value; false: none, so only {}).
      if (!required.empty()) {
        return Bad(absl::StrCat(where, "/required"),
                   absl::StrCat("'", *required.begin(), "' is not in 'properties'"));
      }
      const json extra = s.value("additionalProperties", json(true));
      if (extra.is_boolean() && !extra.get<bool>()) {
        int lo = 0, hi = -1;
        KVFOLD_RETURN_IF_ERROR(Bounds(s, "minProperties", "maxProperties", where, &lo, &hi));
        if (lo > 0) {
          return Bad(absl::StrCat(where, "/minProperties"),
                     "is above 0 where no key may be written");
        }
        return Add(std::move(n));
      }
      auto values = Compile(extra, absl::StrCat(where, "/additionalProperties"), depth + 1);
      if (!values.ok()) return values.status();
      n.free_keys = true;
      n.values = *values;
      KVFOLD_RETURN_IF_ERROR(MapKeys(s, where, depth, &n));
      return Add(std::move(n));
    }
    for (const char* key : {"propertyNames", "minProperties", "maxProperties"}) {
      if (s.contains(key) && !leniency_.Skip(where, key)) {
        return Bad(absl::StrCat(where, "/", key),
                   "is supported for maps (no 'properties'; keys of 'additionalProperties')");
      }
    }
    if (static_cast<int>(props->size()) > kMaxProperties) {
      return Bad(absl::StrCat(where, "/properties"),
                 absl::StrCat(props->size(), " properties; at most ", kMaxProperties));
    }
    if (s.contains("additionalProperties") && !s["additionalProperties"].is_boolean() &&
        !s["additionalProperties"].is_object()) {
      return Bad(absl::StrCat(where, "/additionalProperties"), "must be a schema");
    }
    // Listed properties: written in the schema's order; extra keys never written (valid
    // whatever additionalProperties says).
    for (const auto& [name, sub] : props->items()) {
      auto value = Compile(sub, absl::StrCat(where, "/properties/", name), depth + 1);
      if (!value.ok()) return value.status();
      n.properties.push_back(Property{json(name).dump(), *value, required.count(name) > 0});
      required.erase(name);
    }
    if (!required.empty()) {
      return Bad(absl::StrCat(where, "/required"),
                 absl::StrCat("'", *required.begin(), "' is not in 'properties'"));
    }
    return Add(std::move(n));
  }

  // A map's keys (free_keys node *n): propertyNames, a schema of strings (its node a
  // kString: pattern, lengths, format; or a kLiterals of strings, each key then written
  // at most once), and minProperties / maxProperties. minProperties needs listed keys:
  // other keys could repeat, and a parser keeps one of each, so the keys written would
  // overcount the object's.
  absl::Status MapKeys(const json& s, const std::string& where, int depth, Node* n) {
    KVFOLD_RETURN_IF_ERROR(
        Bounds(s, "minProperties", "maxProperties", where, &n->min_properties, &n->max_properties));
    if (s.contains("propertyNames")) {
      const std::string at = absl::StrCat(where, "/propertyNames");
      auto keys = Compile(s["propertyNames"], at, depth + 1);
      if (!keys.ok()) return keys.status();
      if (*keys != Grammar::kAnyValue) {
        const Node& k = grammar_->nodes_[*keys];
        const bool strings = !unfilled_.count(*keys) &&
                             (k.kind == NodeKind::kString ||
                              (k.kind == NodeKind::kLiterals && !k.ranged &&
                               std::all_of(k.literals.begin(), k.literals.end(),
                                           [](const std::string& l) { return l[0] == '"'; })));
        if (!strings && leniency_.Skip(where, "propertyNames")) return absl::OkStatus();
        if (!strings) {
          return Bad(at, absl::StrCat("must be a schema of strings: type string (with pattern, "
                                      "lengths or format), or enum / const of at most ",
                                      kMaxLiterals, " strings"));
        }
        n->keys = *keys;
        if (k.kind == NodeKind::kLiterals) {
          const int count = static_cast<int>(k.literals.size());
          if (n->min_properties > count) {
            return Bad(where, absl::StrCat("minProperties is above the ", count,
                                           " keys of 'propertyNames'"));
          }
          n->max_properties = n->max_properties < 0 ? count : std::min(n->max_properties, count);
        }
      }
    }
    const bool listed = n->keys >= 0 && grammar_->nodes_[n->keys].kind == NodeKind::kLiterals;
    if (n->min_properties > 0 && !listed) {
      if (leniency_.Skip(where, "minProperties")) {
        n->min_properties = 0;
        return absl::OkStatus();
      }
      return Bad(absl::StrCat(where, "/minProperties"),
                 "is supported where 'propertyNames' lists the keys (enum / const): other "
                 "keys could repeat, and a parser keeps one of each");
    }
    return absl::OkStatus();
  }

  const json& root_;
  std::shared_ptr<Grammar> grammar_;
  std::map<std::string, int> refs_;
  std::set<int> unfilled_;  // $ref slots whose target is being compiled
  schema::Leniency leniency_;
  size_t pattern_bytes_ = 0;  // MemoryBytes of the patterns compiled so far
};

absl::StatusOr<std::shared_ptr<const Grammar>> Grammar::Choice(
    const std::vector<std::string>& choices) {
  if (choices.empty() || static_cast<int>(choices.size()) > kMaxValues) {
    return absl::InvalidArgumentError(
        absl::StrCat("choices: ", choices.size(), " given; 1 to ", kMaxValues, " allowed"));
  }
  std::set<std::string> seen;
  for (const std::string& c : choices) {
    if (c.empty()) return absl::InvalidArgumentError("choices: a choice is empty");
    if (!seen.insert(c).second) {
      return absl::InvalidArgumentError(absl::StrCat("choices: \"", c, "\" is given twice"));
    }
  }
  auto grammar = std::shared_ptr<Grammar>(new Grammar());
  Node node;
  node.kind = NodeKind::kLiterals;
  node.literals = choices;
  RangeIfLong(&node);
  grammar->nodes_.push_back(std::move(node));
  grammar->root_ = grammar->num_nodes() - 1;
  grammar->leading_space_ = false;
  return std::shared_ptr<const Grammar>(std::move(grammar));
}

absl::StatusOr<std::shared_ptr<const Grammar>> Grammar::FromSchema(std::string_view schema,
                                                                   bool compact, bool lenient) {
  std::vector<LenientScope> scopes;
  if (lenient) scopes.push_back({});
  return FromSchema(schema, compact, std::move(scopes));
}

absl::StatusOr<std::shared_ptr<const Grammar>> Grammar::FromSchema(
    std::string_view schema, bool compact, std::vector<LenientScope> scopes) {
  // The compiler recurses per level of the schema.
  if (absl::Status s = CheckJsonDepth(schema, "the schema"); !s.ok()) return s;
  json root = json::parse(schema, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError("the schema is not valid JSON");
  return SchemaCompiler(root, compact, std::move(scopes)).Run();
}

}  // namespace kvfold::structured
