#include "inference_svc/service/session_codec.h"

#include "inference_svc/memory/session_block.h"

namespace kvfold::service {

engine::KvMode FromProtoMode(v1::KvMode mode) {
  auto m = memory::FromProtoMode(mode);
  return m.ok() ? *m : engine::KvMode::kFull;
}

v1::KvMode ToProtoMode(engine::KvMode mode) { return memory::ToProtoMode(mode); }

bool IsMemoryMode(v1::KvMode mode) {
  return mode == v1::KV_MODE_MEMORY || mode == v1::KV_MODE_MEMORY_ONLY;
}

}  // namespace kvfold::service
