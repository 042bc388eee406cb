// Bearer-token authentication shared by both services.
//
// Tokens file: one "<token> <tenant>" pair per line; '#' starts a comment; blank lines are
// ignored. Tokens and tenants are printable ASCII without spaces.
#ifndef KVFOLD_COMMON_AUTH_H_
#define KVFOLD_COMMON_AUTH_H_

#include <string>

#include <grpcpp/server_context.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace kvfold {

// The tenant used when a server runs without a tokens file.
inline constexpr char kDefaultTenant[] = "default";

class TokenTable {
 public:
  // Returns InvalidArgument naming the line for a malformed file, NotFound if it is missing.
  static absl::StatusOr<TokenTable> LoadFile(const std::string& path);
  static absl::StatusOr<TokenTable> Parse(const std::string& text);

  // The tenant of `token`, or UNAUTHENTICATED.
  absl::StatusOr<std::string> TenantOf(const std::string& token) const;
  size_t size() const { return tenants_.size(); }

 private:
  absl::flat_hash_map<std::string, std::string> tenants_;
};

// Resolves the caller's tenant. tokens == nullptr (auth off): kDefaultTenant.
// Otherwise requires `authorization: Bearer <token>` metadata: UNAUTHENTICATED when it is
// missing, malformed or unknown.
absl::StatusOr<std::string> AuthenticateTenant(const TokenTable* tokens,
                                               const grpc::ServerContextBase& context);

}  // namespace kvfold

#endif  // KVFOLD_COMMON_AUTH_H_
