// RadosBackend: connection, single-object reads and helpers (rados_backend.h).
#include "memory_svc/store/rados_backend.h"

#include <cerrno>
#include <cstring>
#include <ctime>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "memory_svc/store/rados_layout.h"

namespace kvfold::memory_svc {

namespace layout = rados_layout;
using librados::bufferlist;

// A negative errno from librados -> absl::Status, the one translation:
//   ENOENT                                   -> NOT_FOUND
//   EEXIST                                   -> ALREADY_EXISTS
//   ECANCELED                                -> ABORTED (a compare failed)
//   EINVAL, ENAMETOOLONG, E2BIG, EFBIG       -> INVALID_ARGUMENT
//   EPERM, EACCES                            -> PERMISSION_DENIED
//   ENOSPC, EDQUOT                           -> RESOURCE_EXHAUSTED (pool or cluster full)
//   EIO                                      -> DATA_LOSS
//   ETIMEDOUT, EAGAIN, EBUSY, ENOTCONN, ESHUTDOWN (also a blocklisted client),
//   ECONNREFUSED                             -> UNAVAILABLE (retry)
//   anything else                            -> INTERNAL
absl::Status FromRados(int r, absl::string_view what) {
  if (r >= 0) return absl::OkStatus();
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (-r) {
    case ENOENT: code = absl::StatusCode::kNotFound; break;
    case EEXIST: code = absl::StatusCode::kAlreadyExists; break;
    case ECANCELED: code = absl::StatusCode::kAborted; break;
    case EINVAL:
    case ENAMETOOLONG:
    case E2BIG:
    case EFBIG: code = absl::StatusCode::kInvalidArgument; break;
    case EPERM:
    case EACCES: code = absl::StatusCode::kPermissionDenied; break;
    case ENOSPC:
    case EDQUOT: code = absl::StatusCode::kResourceExhausted; break;
    case EIO: code = absl::StatusCode::kDataLoss; break;
    case ETIMEDOUT:
    case EAGAIN:
    case EBUSY:
    case ENOTCONN:
    case ESHUTDOWN:
    case ECONNREFUSED: code = absl::StatusCode::kUnavailable; break;
    default: code = absl::StatusCode::kInternal; break;
  }
  return absl::Status(code, absl::StrCat(what, ": rados: ", std::strerror(-r)));
}

bufferlist RadosBytes(absl::string_view s) {
  bufferlist bl;
  bl.append(s.data(), s.size());
  return bl;
}

absl::string_view RadosView(const bufferlist& bl) {
  // c_str() makes the list contiguous; it does not change its contents.
  return absl::string_view(const_cast<bufferlist&>(bl).c_str(), bl.length());
}

RadosBackend::~RadosBackend() { Close().IgnoreError(); }

absl::Status RadosBackend::Open(const RadosOptions& o) {
  if (o.conf_file.empty()) return absl::InvalidArgumentError("rados: conf_file is required");
  if (o.pool.empty()) return absl::InvalidArgumentError("rados: pool is required");
  if (o.op_timeout_seconds <= 0) {
    return absl::InvalidArgumentError("rados: op_timeout_seconds must be > 0");
  }
  if (int r = cluster_.init2(o.user.c_str(), "ceph", 0); r < 0) {
    return absl::InvalidArgumentError(absl::StrCat("rados: bad user '", o.user, "': ",
                                                   std::strerror(-r)));
  }
  initialized_ = true;
  if (int r = cluster_.conf_read_file(o.conf_file.c_str()); r < 0) {
    return absl::NotFoundError(
        absl::StrCat("rados: cannot read ", o.conf_file, ": ", std::strerror(-r)));
  }
  if (!o.keyring_file.empty()) {  // the flag wins over ceph.conf
    if (int r = cluster_.conf_set("keyring", o.keyring_file.c_str()); r < 0) {
      return FromRados(r, "set keyring");
    }
  }
  const std::string timeout = std::to_string(o.op_timeout_seconds);
  for (const char* key : {"rados_osd_op_timeout", "rados_mon_op_timeout", "client_mount_timeout"}) {
    if (int r = cluster_.conf_set(key, timeout.c_str()); r < 0) return FromRados(r, key);
  }
  if (int r = cluster_.connect(); r < 0) {
    return absl::UnavailableError(absl::StrCat(
        "rados: cannot connect to the cluster of ", o.conf_file, " as ", o.user, ": ",
        std::strerror(-r), " (monitors unreachable, or with cephx a missing or wrong key: ",
        o.keyring_file.empty() ? "no keyring given" : "keyring " + o.keyring_file, ")"));
  }
  connected_ = true;
  if (int r = cluster_.ioctx_create(o.pool.c_str(), io_); r < 0) {
    return r == -ENOENT ? absl::NotFoundError(absl::StrCat("rados: no pool '", o.pool, "'"))
                        : FromRados(r, absl::StrCat("open pool ", o.pool));
  }
  io_.set_namespace(o.name_space);
  return absl::OkStatus();
}

absl::Status RadosBackend::Close() {
  if (connected_) io_.close();
  if (initialized_) cluster_.shutdown();
  connected_ = initialized_ = false;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<SessionState>> RadosBackend::DecodeHead(
    const std::map<std::string, bufferlist>& attrs) {
  auto gen = attrs.find(layout::kGenXattr);
  auto meta = attrs.find(layout::kMetaXattr);
  if (gen == attrs.end() || meta == attrs.end()) {
    return absl::DataLossError("session head object lacks its gen or meta attribute");
  }
  absl::StatusOr<SessionMeta> decoded = DecodeSessionMeta(RadosView(meta->second));
  if (!decoded.ok()) return decoded.status();
  return std::optional<SessionState>(
      SessionState{*std::move(decoded), std::string(RadosView(gen->second))});
}

absl::StatusOr<std::optional<SessionState>> RadosBackend::ReadSession(
    absl::string_view tenant, absl::string_view session_id) const {
  std::map<std::string, bufferlist> attrs;
  const int r = io_.getxattrs(layout::HeadObject(tenant, session_id), attrs);
  if (r == -ENOENT) return std::optional<SessionState>();
  if (r < 0) return FromRados(r, "read session head");
  return DecodeHead(attrs);
}

uint64_t RadosBackend::Nonce() {
  absl::MutexLock lock(&rng_mu_);
  return rng_();
}

absl::StatusOr<std::map<uint64_t, uint64_t>> RadosBackend::ReadNonces(
    absl::string_view tenant, absl::string_view session_id,
    const std::set<uint64_t>& versions) const {
  std::set<std::string> keys;
  for (uint64_t v : versions) keys.insert(layout::VersionKey(v));
  std::map<std::string, bufferlist> vals;
  const int r = io_.omap_get_vals_by_keys(layout::HeadObject(tenant, session_id), keys, &vals);
  std::map<uint64_t, uint64_t> out;
  if (r == -ENOENT) return out;
  if (r < 0) return FromRados(r, "read version entries");
  for (uint64_t v : versions) {
    auto it = vals.find(layout::VersionKey(v));
    if (it == vals.end()) continue;
    absl::StatusOr<uint64_t> nonce = layout::DecodeVersionNonce(RadosView(it->second));
    if (!nonce.ok()) return nonce.status();
    out[v] = *nonce;
  }
  return out;
}

absl::StatusOr<std::map<uint64_t, uint64_t>> RadosBackend::ReadAllNonces(
    absl::string_view tenant, absl::string_view session_id) const {
  constexpr uint64_t kOmapBatch = 512;
  const std::string head = layout::HeadObject(tenant, session_id);
  std::map<uint64_t, uint64_t> out;
  std::string after;
  bool more = true;
  while (more) {
    std::map<std::string, bufferlist> vals;
    const int r = io_.omap_get_vals2(head, after, kOmapBatch, &vals, &more);
    if (r == -ENOENT) return out;
    if (r < 0) return FromRados(r, "read version entries");
    for (const auto& [key, value] : vals) {
      uint64_t v = 0;
      if (key.size() != 17 || !absl::SimpleHexAtoi(absl::string_view(key).substr(1), &v)) continue;
      absl::StatusOr<uint64_t> nonce = layout::DecodeVersionNonce(RadosView(value));
      if (nonce.ok()) out[v] = *nonce;
    }
    if (vals.empty()) break;
    after = vals.rbegin()->first;
  }
  return out;
}

void RadosBackend::RemoveObjects(const std::vector<std::string>& oids) {
  std::vector<librados::AioCompletion*> pending;
  for (const std::string& oid : oids) {
    librados::AioCompletion* c = librados::Rados::aio_create_completion();
    if (io_.aio_remove(oid, c) < 0) {
      c->release();
      continue;
    }
    pending.push_back(c);
  }
  for (librados::AioCompletion* c : pending) {
    c->wait_for_complete();
    c->release();
  }
}

absl::Status RadosBackend::AddToIndex(absl::string_view tenant, absl::string_view session_id) {
  {
    absl::MutexLock lock(&tenants_mu_);
    if (!known_tenants_.contains(tenant)) {
      std::map<std::string, bufferlist> entry{{std::string(tenant), bufferlist()}};
      if (int r = io_.omap_set(layout::kTenantsObject, entry); r < 0) {
        return FromRados(r, "register tenant");
      }
      known_tenants_.insert(std::string(tenant));
    }
  }
  std::map<std::string, bufferlist> entry{{std::string(session_id), bufferlist()}};
  return FromRados(io_.omap_set(layout::IndexObject(tenant), entry), "index session");
}

void RadosBackend::RemoveFromIndex(absl::string_view tenant, absl::string_view session_id) {
  io_.omap_rm_keys(layout::IndexObject(tenant), {std::string(session_id)});
  // A create that indexed the id between the removal of the head and now would be hidden
  // from listings: put the entry back when the head exists again.
  uint64_t size = 0;
  time_t mtime = 0;
  if (io_.stat(layout::HeadObject(tenant, session_id), &size, &mtime) == 0) {
    AddToIndex(tenant, session_id).IgnoreError();
  }
}

absl::Status RadosBackend::CorruptPayloadForTesting(absl::string_view tenant,
                                                    absl::string_view session_id,
                                                    uint64_t version) {
  absl::StatusOr<std::map<uint64_t, uint64_t>> nonces =
      ReadNonces(tenant, session_id, std::set<uint64_t>{version});
  if (!nonces.ok()) return nonces.status();
  if (nonces->empty()) return absl::NotFoundError("no such version");
  const std::string oid =
      layout::PayloadObject(tenant, session_id, version, nonces->begin()->second);
  bufferlist bl;
  if (int r = io_.read(oid, bl, 0, 0); r < 0) return FromRados(r, "read payload");
  std::string bytes(RadosView(bl));
  if (bytes.empty()) return absl::FailedPreconditionError("empty payload");
  bytes[bytes.size() / 2] ^= 0x01;
  bufferlist out = RadosBytes(bytes);
  return FromRados(io_.write_full(oid, out), "corrupt payload");
}

absl::StatusOr<std::unique_ptr<StoreBackend>> OpenRadosBackend(const StoreOptions& options) {
  auto backend = std::make_unique<RadosBackend>();
  if (absl::Status s = backend->Open(options.rados); !s.ok()) return s;
  return backend;
}

}  // namespace kvfold::memory_svc
