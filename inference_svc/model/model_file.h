// A loaded model on the host: config + HF-named tensors (memory-mapped where possible).
//
// Loaders (each returns InvalidArgument with the file name and what is wrong for
// malformed input - truncated files, bad JSON, shape/dtype mismatches, missing tensors -
// NotFound when a path does not exist, Unimplemented for unknown architectures; they
// never crash on bad input):
//   LoadModel(path)         a file (a GGUF file by its magic, else a llama2.c checkpoint)
//                           or a directory: Hugging Face when it has config.json, else
//                           the one llama2.c checkpoint in it (*.bin other than
//                           tokenizer.bin / tok*.bin)
//   LoadHfDirectory(dir)    config.json + model.safetensors | model.safetensors.index.json
//   LoadLlama2c(file)       llama2.c "version 0" checkpoint (7 x int32 header, fp32)
//   LoadGguf(file)          llama.cpp GGUF, architectures llama and qwen2; F32/F16/BF16/Q8_0
// Tensor names are HF names, e.g. "model.layers.3.self_attn.q_proj.weight". llama2.c
// and GGUF q/k rows are permuted to the HF rotate_half convention on load.
#ifndef KVFOLD_INFERENCE_SVC_MODEL_MODEL_FILE_H_
#define KVFOLD_INFERENCE_SVC_MODEL_MODEL_FILE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "inference_svc/model/config.h"

namespace kvfold::model {

using core::DType;

// A read-only tensor in host memory. `keepalive` owns the bytes (an mmap or a vector).
struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t size_bytes = 0;
  std::shared_ptr<const void> keepalive;

  int64_t numel() const;
};

struct ModelFile {
  ModelConfig config;
  std::map<std::string, HostTensor> tensors;  // sorted by HF name
  std::string source_path;
  std::string source_format;  // "hf", "llama2c" or "gguf"

  // The tensor `name` checked against `shape`; InvalidArgument when missing or mismatched.
  absl::StatusOr<const HostTensor*> Get(const std::string& name,
                                        const std::vector<int64_t>& shape) const;
  // Checks that every tensor the architecture needs is present with the right shape.
  absl::Status ValidateTensors() const;
};

absl::StatusOr<ModelFile> LoadModel(const std::string& path);
absl::StatusOr<ModelFile> LoadHfDirectory(const std::string& dir);
absl::StatusOr<ModelFile> LoadLlama2c(const std::string& file);
absl::StatusOr<ModelFile> LoadGguf(const std::string& file);

// Parses a llama2.c checkpoint held in memory (used by LoadLlama2c and the fuzz target).
absl::StatusOr<ModelFile> ParseLlama2c(std::shared_ptr<const std::string> bytes);
// Parses a GGUF model held in `bytes` (which `keepalive` owns; tensors point into them or
// own their repacked copies). `what` names the file in messages. Unimplemented for other
// architectures, tensor types and RoPE variants (docs/model-format.md, "GGUF").
absl::StatusOr<ModelFile> ParseGgufModel(std::string_view bytes,
                                         std::shared_ptr<const void> keepalive,
                                         std::string_view what);

// HF tensor names.
std::string LayerTensorName(int layer, const char* suffix);  // "model.layers.N.<suffix>"

// Model fingerprint (docs/contracts.md, "Fingerprints"): lower-case hex sha256 over CanonicalString() of the
// config followed by every tensor sorted by name (name, dtype, shape, raw bytes).
std::string Fingerprint(const ModelFile& model);

// `t` re-encoded as `dtype` (F32, F16, BF16 or Q8; via F32). The result owns its bytes.
// InvalidArgument for other dtypes and for Q8 of a tensor whose rank is not 2.
absl::StatusOr<HostTensor> ConvertHostTensor(const HostTensor& t, DType dtype);

// Writes an HF directory (config.json + model.safetensors) with every tensor converted to
// `dtype`; with Q8 only rank-2 tensors (weight matrices, embeddings) are quantized and
// the others are written F32. Used by `kvfold convert` and make_random_model.
absl::Status WriteHfDirectory(const ModelFile& model, const std::string& dir, DType dtype);

}  // namespace kvfold::model

#endif  // KVFOLD_INFERENCE_SVC_MODEL_MODEL_FILE_H_
