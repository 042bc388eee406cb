// Bearer-token authentication shared by both services.
//
// Tokens file: one "<token> <tenant>" pair per line; '#' starts a comment; blank lines are
// ignored. Tokens and tenants are printable ASCII without spaces.
//
// A TokenTable loaded from a file can be reloaded while the server runs (Reload(), called on
// SIGHUP, and a watcher that notices the file change): every call authenticates against
// the newest table that parsed; a file that fails to parse leaves the previous table in
// force. Presented tokens are compared in constant time (SHA-256 digests, every entry
// compared in full), so response timing does not reveal how much of a token matched.
#ifndef KVFOLD_COMMON_AUTH_H_
#define KVFOLD_COMMON_AUTH_H_

#include <grpcpp/server_context.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvfold {

// The tenant of every caller when a server runs with --insecure-no-auth.
inline constexpr char kDefaultTenant[] = "default";

class TokenTable {
 public:
  // Returns InvalidArgument naming the line for a malformed file, NotFound if it is missing.
  static absl::StatusOr<TokenTable> LoadFile(const std::string& path);
  static absl::StatusOr<TokenTable> Parse(const std::string& text);

  TokenTable(TokenTable&&) noexcept;
  TokenTable& operator=(TokenTable&&) noexcept;
  ~TokenTable();  // stops the watcher

  // The tenant of `token`, or UNAUTHENTICATED. Thread-safe, also during a reload.
  absl::StatusOr<std::string> TenantOf(const std::string& token) const;
  size_t size() const;

  // Re-reads the file this table was loaded from. On error the table in force is kept and
  // the error returned (FAILED_PRECONDITION for a table that came from Parse()).
  absl::Status Reload();
  // Reloads whenever the file's bytes change, checked every `period` (common/
  // file_watcher.h: in-place rewrites, renames and Kubernetes' symlink swaps alike).
  // Errors are printed to stderr once per change and the previous table stays. Idempotent.
  void WatchFile(absl::Duration period = absl::Seconds(1));
  // Successful reloads so far (tests and logs).
  uint64_t reloads() const;

 private:
  struct State;
  TokenTable();
  std::unique_ptr<State> state_;
};

// Resolves the caller's tenant. tokens == nullptr (--insecure-no-auth): kDefaultTenant.
// Otherwise requires `authorization: Bearer <token>` metadata: UNAUTHENTICATED when it is
// missing, malformed or unknown.
absl::StatusOr<std::string> AuthenticateTenant(const TokenTable* tokens,
                                               const grpc::ServerContextBase& context);

// Reads a secret (a bearer token) from `path`, trailing whitespace removed. NotFound when
// the file cannot be read, InvalidArgument when it is empty or holds a space or a
// non-printable byte.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path);

}  // namespace kvfold

#endif  // KVFOLD_COMMON_AUTH_H_
