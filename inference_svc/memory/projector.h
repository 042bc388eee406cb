// The MemoryProjector: folds rows X = concat(mem, H') into M new memory vectors.
// Files and tensor names are fixed by docs/contracts.md ("The MemoryProjector files"), the
// forward pass by docs/memory-mode.md; the PyTorch trainer (tools/train_projector) mirrors
// this code and a parity test holds the two together.
//
//   m   = queries + CrossAttn(LN_q(queries), LN_x(X))
//   m   = m + SelfAttn(LN_self(m))
//   m   = m + FFN(LN_ffn(m)),   FFN(z) = down(GELU_erf(up(z)))
//   out = LN_out(m)
//
// All math is fp32 on the CPU; the whole projector is small (a few MB for d = 4096 is
// ~12 d^2 floats, the largest case), so it is held as fp32 whatever its file dtype.
// Optionally (Projector::UseBackend) its matmuls run on a kernels::Backend, e.g. cuBLAS
// when the engine runs on "cuda"; the CPU path is unchanged.
#ifndef KVFOLD_INFERENCE_SVC_MEMORY_PROJECTOR_H_
#define KVFOLD_INFERENCE_SVC_MEMORY_PROJECTOR_H_

#include <array>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inference_svc/memory/safetensors_lite.h"

namespace kvfold::kernels {
class Backend;
}  // namespace kvfold::kernels

namespace kvfold::memory {

class ProjectorDevice;          // projector.cc: the weights on a kernels::Backend
struct ProjectorDeviceScratch;  // projector.cc: a caller's stream and device activations

// How memory mode's KV window behaves between folds (docs/memory-mode.md "Window policy").
enum class WindowPolicy {
  // All W..W + C window tokens stay resident; the fold drops the oldest C (budget M + W + C).
  kGrowing,
  // Only the last W tokens stay resident (the tokens between them and the last fold wait,
  // as ids, for the next fold); budget M + W.
  kSliding,
};
const char* WindowPolicyName(WindowPolicy policy);  // "growing", "sliding"

// projector.json. Every field is required in the file except where a default is stated.
struct ProjectorConfig {
  int mem_slots = 16;      // M: memory vectors produced per fold
  int hidden_size = 64;    // d: the base model's hidden_size
  int num_heads = 8;       // attention heads; must divide hidden_size
  int ffn_mult = 4;        // FFN hidden width = ffn_mult * hidden_size
  int chunk_size = 32;     // C: tokens folded per fold
  int window_size = 64;    // W: tokens kept as a KV window after a fold (0 = memory_only)
  int input_layers = 1;    // 1: last layer's hidden states; 3: last three, via in_proj
  // "window_policy" in the file; absent = growing (written only when sliding, so older
  // files keep their bytes and fingerprints). Default: kGrowing.
  WindowPolicy window_policy = WindowPolicy::kGrowing;
  // S: the first S tokens of a session are never folded and stay resident in front of the
  // memory (docs/memory-mode.md "Sink tokens"). "sink_tokens" in the file; absent = 0
  // (written only when > 0, so older files keep their bytes). Default: 0.
  int sink_tokens = 0;
  // G: positions left free between the prefix (sinks and memory, position 0) and the
  // window, whose token i then sits at position 1 + G + i, so the prefix reads as text
  // from further back (docs/memory-mode.md "Prefix gap"). "prefix_gap" in the file; absent
  // = 0 (written only when > 0). Default: 0.
  int prefix_gap = 0;
  // memory_only's window: 0 = the tokens since the last fold (0..C, resident S + M + C);
  // 1..C = the last memory_only_window tokens always stay visible, sliding, so the window
  // never runs empty after a fold (resident S + M + memory_only_window; docs/memory-mode.md
  // "Modes"). "memory_only_window" in the file; absent = 0 (written only when > 0).
  // Default: 0.
  int memory_only_window = 0;
  // Per-layer memory K/V (docs/memory-mode.md "Per-layer memory K/V"): L learned maps of
  // the memory vectors added to each layer's memory-row keys and values after the memory
  // is expanded. memory_kv_layers = L (the model's layers; 0 = none), memory_kv_dim = the
  // model's num_kv_heads * head_dim, memory_kv_hidden = H (0: linear maps of mem; H > 0:
  // of GELU_erf(up(mem)), one shared layer of H). "memory_kv_layers", "memory_kv_dim",
  // "memory_kv_hidden" in the file, all three or none (written only when L > 0).
  // Default: 0 (none).
  int memory_kv_layers = 0;
  int memory_kv_dim = 0;
  int memory_kv_hidden = 0;
  std::string dtype = "f32";  // dtype the tensors were written in (informational)
  float ln_eps = 1e-5f;    // LayerNorm epsilon
  std::string model_fingerprint;  // hex sha256 of the base model (kvfold info --json)

  int head_dim() const { return hidden_size / num_heads; }
  int ffn_size() const { return ffn_mult * hidden_size; }
  // Width of one hidden-state row handed to Forward(): input_layers * hidden_size.
  int input_width() const { return input_layers * hidden_size; }
  // Memory mode's largest resident KV entries: S + M + W + C (growing) or S + M + W
  // (sliding).
  int kv_budget() const {
    return sink_tokens + mem_slots + window_size +
           (window_policy == WindowPolicy::kSliding ? 0 : chunk_size);
  }
  bool has_memory_kv() const { return memory_kv_layers > 0; }
  // memory_only's: S + M + C, or S + M + memory_only_window when that is set.
  int memory_only_budget() const {
    return sink_tokens + mem_slots + (memory_only_window > 0 ? memory_only_window : chunk_size);
  }
};

// Parses and validates projector.json text. INVALID_ARGUMENT names the offending field.
absl::StatusOr<ProjectorConfig> ParseProjectorConfig(std::string_view json_text);
// The canonical projector.json text for `config` (what SaveProjector writes).
std::string ProjectorConfigJson(const ProjectorConfig& config);

// Scratch buffers for Forward(); grown on first use, reused afterwards so that steady-state
// folds do not allocate. One per thread of use.
struct ProjectorScratch {
  std::vector<float> x, xn, qn, q, k, v, attn, proj, m, mn, ffn;
  std::vector<float> scores;
  std::vector<float> kv_hidden;  // MemoryKv: [M, H]
  // With Projector::UseBackend: this caller's stream and device buffers (grown like the
  // vectors above; made again when the projector's backend changes).
  std::shared_ptr<ProjectorDeviceScratch> device;
};

class Projector {
 public:
  // Loads <dir>/projector.json and <dir>/projector.safetensors.
  // NOT_FOUND: a file is missing. INVALID_ARGUMENT: malformed JSON or safetensors, a field
  // out of range, a missing, unexpected or wrongly shaped tensor.
  static absl::StatusOr<std::unique_ptr<Projector>> Load(const std::string& dir);

  // Load() plus the compatibility check against the base model:
  // FAILED_PRECONDITION when the projector was made for another model (fingerprint) or
  // another hidden_size.
  static absl::StatusOr<std::unique_ptr<Projector>> LoadForModel(
      const std::string& dir, std::string_view model_fingerprint, int model_hidden_size);

  // Builds a projector from tensors already in memory (tests, make_random_projector).
  // `fingerprint` is stored as is. Same validation as Load().
  static absl::StatusOr<std::unique_ptr<Projector>> FromTensors(ProjectorConfig config,
                                                                Fp32TensorMap tensors,
                                                                std::string fingerprint);

  // FAILED_PRECONDITION unless the projector was made for this model.
  absl::Status CheckCompatible(std::string_view model_fingerprint, int model_hidden_size) const;

  const ProjectorConfig& config() const { return config_; }
  // Hex sha256 over the projector.json bytes followed by the projector.safetensors bytes.
  const std::string& fingerprint() const { return fingerprint_; }

  // out[M, d] = Projector(concat(mem, H')).
  //   mem:    [mem_rows, d], mem_rows = 0 (before the first fold) or any count
  //   hidden: [num_tokens, input_layers * d], num_tokens >= 1 (the folded chunk)
  //   out:    [M, d]; may not alias the inputs
  // INVALID_ARGUMENT on size mismatches. Thread-compatible (const, scratch per caller).
  absl::Status Forward(std::span<const float> mem, std::span<const float> hidden,
                       std::span<float> out, ProjectorScratch* scratch) const;

  // The per-layer memory K/V additions (config().has_memory_kv()):
  //   out[l][0] = z @ k[l]^T + b, out[l][1] = z @ v[l]^T + b, each [M, memory_kv_dim],
  //   z = mem or GELU_erf(up(mem)); out is [memory_kv_layers, 2, M, memory_kv_dim].
  // Always on the CPU (a few rows). INVALID_ARGUMENT on size mismatches or without maps.
  absl::Status MemoryKv(std::span<const float> mem, std::span<float> out,
                        ProjectorScratch* scratch) const;

  // Runs every Linear of Forward (in_proj, cross/self q k v o, ffn up/down: all the
  // matmuls) on `backend` with Backend::MatMul (cuBLAS on "cuda", F32 weights, F32
  // accumulation); LayerNorm, the attention over the few rows, GELU and the residual adds
  // stay on the CPU. The weights are copied to the device here, once. Each matmul group
  // is one upload, the MatMuls and one download on the caller's stream (synchronous), so
  // Forward stays thread-compatible. Results match the CPU path within float rounding,
  // not bit for bit (1e-4: tests/kernels/cuda/projector_cuda_test.cc). nullptr returns to
  // the CPU path, which is bit-identical to a projector that never had a backend.
  // Meant for device backends (call it when the engine runs on "cuda"); with a CPU
  // backend it works too but only reorders the CPU arithmetic. `backend` must outlive the
  // projector (or the next UseBackend). Not safe concurrently with Forward.
  // ResourceExhausted / Internal from the backend.
  absl::Status UseBackend(kernels::Backend* backend);
  // UseBackend(backend) when `backend` is a device backend (not "cpu"/"cpu-ref"); a no-op
  // on the CPU, so the CPU path stays bit-exact. What loaders call next to an Engine.
  absl::Status UseEngineBackend(kernels::Backend* backend);
  // The backend set by UseBackend, or nullptr (CPU path).
  kernels::Backend* backend() const;

 private:
  Projector(ProjectorConfig config, Fp32TensorMap tensors, std::string fingerprint);
  const float* T(const std::string& name) const { return tensors_.at(name).data.data(); }
  // y[rows, out] = x[rows, in] @ W^T + b for the tensors `<name>.weight` / `<name>.bias`,
  // on the CPU or (UseBackend) on the device.
  absl::Status RunLinear(ProjectorScratch* s, const float* x, int rows, int in, const char* weight,
                         const char* bias, int out, float* y) const;

  ProjectorConfig config_;
  Fp32TensorMap tensors_;
  std::string fingerprint_;
  std::shared_ptr<const ProjectorDevice> device_;  // null: CPU path
  // Per layer: k weight, k bias, v weight, v bias of the memory K/V maps (into tensors_).
  std::vector<std::array<const float*, 4>> kv_maps_;
  std::array<const float*, 2> kv_up_{};  // mem_kv.up weight, bias (memory_kv_hidden > 0)
};

// The tensor names and shapes a projector with `config` must contain (sorted by name).
std::vector<std::pair<std::string, std::vector<int64_t>>> ProjectorTensorShapes(
    const ProjectorConfig& config);

// Writes <dir>/projector.json and <dir>/projector.safetensors (F32) and returns the
// projector fingerprint. Creates `dir` if needed. INVALID_ARGUMENT if the tensors do not
// match the config; UNAVAILABLE on I/O errors.
absl::StatusOr<std::string> SaveProjector(const std::string& dir, const ProjectorConfig& config,
                                          const Fp32TensorMap& tensors);

}  // namespace kvfold::memory

#endif  // KVFOLD_INFERENCE_SVC_MEMORY_PROJECTOR_H_
