// Fuzz entry points for the model parsers: any byte string must give a model or an
// error status, never a crash, a hang or an out-of-bounds read.
#ifndef KVFOLD_TESTS_INFERENCE_SVC_MODEL_FUZZ_PARSERS_FUZZ_H_
#define KVFOLD_TESTS_INFERENCE_SVC_MODEL_FUZZ_PARSERS_FUZZ_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "inference_svc/model/model_file.h"
#include "inference_svc/model/safetensors.h"

namespace kvfold::fuzz {

inline void FuzzSafetensors(const uint8_t* data, size_t size) {
  // A private copy so that reads past `size` are caught by ASan.
  auto bytes = std::make_shared<std::string>(reinterpret_cast<const char*>(data), size);
  auto tensors = model::ParseSafetensors(*bytes, bytes, "fuzz");
  if (tensors.ok()) {
    volatile uint8_t sink = 0;
    for (const auto& [name, t] : *tensors) {
      if (t.size_bytes > 0) {
        sink = sink ^ static_cast<const uint8_t*>(t.data)[0] ^
               static_cast<const uint8_t*>(t.data)[t.size_bytes - 1];
      }
    }
  }
}

inline void FuzzLlama2c(const uint8_t* data, size_t size) {
  auto bytes = std::make_shared<const std::string>(reinterpret_cast<const char*>(data), size);
  auto m = model::ParseLlama2c(bytes);
  if (m.ok()) (void)m->ValidateTensors();
}

inline void FuzzGguf(const uint8_t* data, size_t size) {
  auto bytes = std::make_shared<const std::string>(reinterpret_cast<const char*>(data), size);
  auto m = model::ParseGgufModel(*bytes, bytes, "fuzz");
  if (m.ok()) {
    (void)m->ValidateTensors();
    (void)model::Fingerprint(*m);  // reads every tensor's bytes
  }
}

}  // namespace kvfold::fuzz

#endif  // KVFOLD_TESTS_INFERENCE_SVC_MODEL_FUZZ_PARSERS_FUZZ_H_
