#include "common/auth.h"

#include <cstdio>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/file_watcher.h"
#include "common/sha256.h"

namespace kvfold {
namespace {

struct Entry {
  std::string digest;  // hex SHA-256 of the token
  std::string tenant;
};
using Entries = std::vector<Entry>;

// Equal-length strings compared without an early exit.
bool ConstantTimeEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

absl::StatusOr<std::shared_ptr<const Entries>> ParseEntries(const std::string& text) {
  auto entries = std::make_shared<Entries>();
  absl::flat_hash_set<std::string> seen;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    const size_t hash = line.find('#');
    if (hash != absl::string_view::npos) line = line.substr(0, hash);
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    std::vector<std::string> parts =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (parts.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokens file line ", line_no, ": expected '<token> <tenant>'"));
    }
    std::string digest = Sha256Hex(parts[0]);
    if (!seen.insert(digest).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokens file line ", line_no, ": duplicate token"));
    }
    entries->push_back({std::move(digest), std::move(parts[1])});
  }
  return std::shared_ptr<const Entries>(std::move(entries));
}

}  // namespace

struct TokenTable::State {
  std::string path;  // empty: parsed from text, not reloadable
  mutable std::mutex mu;
  std::shared_ptr<const Entries> entries;  // guarded by mu; swapped whole on reload
  uint64_t reloads = 0;                    // guarded by mu
  std::unique_ptr<FileWatcher> watcher;    // last member: stops before the rest goes

  std::shared_ptr<const Entries> Current() const {
    std::lock_guard<std::mutex> lock(mu);
    return entries;
  }

  absl::Status Reload() {
    if (path.empty()) {
      return absl::FailedPreconditionError("this token table was not loaded from a file");
    }
    absl::StatusOr<std::string> text = ReadFileToString(path, "tokens file");
    if (!text.ok()) return text.status();
    absl::StatusOr<std::shared_ptr<const Entries>> parsed = ParseEntries(*text);
    if (!parsed.ok()) {
      return absl::Status(parsed.status().code(),
                          absl::StrCat(path, ": ", parsed.status().message()));
    }
    std::lock_guard<std::mutex> lock(mu);
    entries = *std::move(parsed);
    ++reloads;
    return absl::OkStatus();
  }
};

TokenTable::TokenTable() : state_(std::make_unique<State>()) {}
TokenTable::TokenTable(TokenTable&&) noexcept = default;
TokenTable& TokenTable::operator=(TokenTable&&) noexcept = default;
TokenTable::~TokenTable() = default;

absl::StatusOr<TokenTable> TokenTable::LoadFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path, "tokens file");
  if (!text.ok()) return text.status();
  absl::StatusOr<TokenTable> table = Parse(*text);
  if (!table.ok()) {
    return absl::Status(table.status().code(), absl::StrCat(path, ": ", table.status().message()));
  }
  table->state_->path = path;
  return table;
}

absl::StatusOr<TokenTable> TokenTable::Parse(const std::string& text) {
  absl::StatusOr<std::shared_ptr<const Entries>> entries = ParseEntries(text);
  if (!entries.ok()) return entries.status();
  TokenTable table;
  table.state_->entries = *std::move(entries);
  return table;
}

absl::StatusOr<std::string> TokenTable::TenantOf(const std::string& token) const {
  const std::shared_ptr<const Entries> entries = state_->Current();
  const std::string digest = Sha256Hex(token);
  const Entry* match = nullptr;
  for (const Entry& e : *entries) {
    // No early exit: every entry is compared, whichever matches.
    if (ConstantTimeEqual(e.digest, digest)) match = &e;
  }
  if (match == nullptr) return absl::UnauthenticatedError("unknown bearer token");
  return match->tenant;
}

size_t TokenTable::size() const { return state_->Current()->size(); }

uint64_t TokenTable::reloads() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->reloads;
}

absl::Status TokenTable::Reload() { return state_->Reload(); }

void TokenTable::WatchFile(absl::Duration period) {
  State* state = state_.get();
  if (state->path.empty() || state->watcher != nullptr) return;
  // The callback uses only the State, which stays put when the TokenTable is moved.
  state->watcher = std::make_unique<FileWatcher>(state->path, period, [state] {
    if (absl::Status s = state->Reload(); !s.ok()) {
      std::fprintf(stderr, "tokens file changed but was not reloaded (the tokens in force "
                           "stay): %s\n", s.ToString().c_str());
    } else {
      std::fprintf(stderr, "tokens file reloaded: %s\n", state->path.c_str());
    }
  });
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

absl::StatusOr<std::string> ReadSecretFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path, "token file");
  if (!text.ok()) return text.status();
  const absl::string_view secret = absl::StripTrailingAsciiWhitespace(*text);
  if (secret.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " is empty"));
  for (const char c : secret) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": a token is printable ASCII without spaces"));
    }
  }
  return std::string(secret);
}

}  // namespace kvfold
