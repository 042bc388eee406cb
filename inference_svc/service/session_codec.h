// Proto KV modes <-> the engine's (one mapping, kvfold::memory's).
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_SESSION_CODEC_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_SESSION_CODEC_H_

#include "inference_svc/engine/session.h"
#include "kvfold/v1/common.pb.h"

namespace kvfold::service {

engine::KvMode FromProtoMode(v1::KvMode mode);  // UNSPECIFIED -> kFull (callers resolve first)
v1::KvMode ToProtoMode(engine::KvMode mode);
bool IsMemoryMode(v1::KvMode mode);

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_SESSION_CODEC_H_
