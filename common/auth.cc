#include "common/auth.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kvfold {

absl::StatusOr<TokenTable> TokenTable::LoadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("tokens file not readable: ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return Parse(ss.str());
}

absl::StatusOr<TokenTable> TokenTable::Parse(const std::string& text) {
  TokenTable table;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    const size_t hash = line.find('#');
    if (hash != absl::string_view::npos) line = line.substr(0, hash);
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    std::vector<std::string> parts = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (parts.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokens file line ", line_no, ": expected '<token> <tenant>'"));
    }
    if (!table.tenants_.emplace(parts[0], parts[1]).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokens file line ", line_no, ": duplicate token"));
    }
  }
  return table;
}

absl::StatusOr<std::string> TokenTable::TenantOf(const std::string& token) const {
  auto it = tenants_.find(token);
  if (it == tenants_.end()) return absl::UnauthenticatedError("unknown bearer token");
  return it->second;
}

absl::StatusOr<std::string> AuthenticateTenant(const TokenTable* tokens,
                                               const grpc::ServerContextBase& context) {
  if (tokens == nullptr) return std::string(kDefaultTenant);
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return absl::UnauthenticatedError("missing 'authorization: Bearer <token>' metadata");
  }
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&value, "Bearer ") || value.empty()) {
    return absl::UnauthenticatedError("authorization metadata must be 'Bearer <token>'");
  }
  return tokens->TenantOf(std::string(value));
}

}  // namespace kvfold
