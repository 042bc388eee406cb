#include "inference_svc/memory/projector.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/sha256.h"
#include "core/status_macros.h"
#include "kernels/backend.h"

namespace kvfold::memory {

// The projector's tensors on a backend (Projector::UseBackend). Only virtual Backend
// methods are called here, so kvfold::memory needs no link dependency on the kernels.
class ProjectorDevice {
 public:
  static absl::StatusOr<std::shared_ptr<const ProjectorDevice>> Create(
      kernels::Backend* backend, const Fp32TensorMap& tensors) {
    auto device = std::shared_ptr<ProjectorDevice>(new ProjectorDevice(backend));
    for (const auto& [name, t] : tensors) {
      const size_t bytes = t.data.size() * sizeof(float);
      // The CPU backend aliases the projector's own vectors (which outlive this).
      auto buffer = backend->AdoptWeights(t.data.data(), bytes, nullptr);
      if (!buffer.ok()) return buffer.status();
      kernels::Tensor view;
      view.data = (*buffer)->data();
      view.dtype = core::DType::kF32;
      view.rank = static_cast<int>(t.shape.size());
      for (size_t i = 0; i < t.shape.size() && i < 4; ++i) view.shape[i] = t.shape[i];
      device->weights_[name] = {*std::move(buffer), view};
    }
    return std::shared_ptr<const ProjectorDevice>(std::move(device));
  }

  kernels::Backend* backend() const { return backend_; }

  // y[rows, out] = x[rows, in] @ W^T + b on the device, through `s`'s stream; returns when
  // y is on the host.
  absl::Status Linear(ProjectorScratch* s, const float* x, int rows, int in, const char* weight,
                      const char* bias, int out, float* y) const;

 private:
  struct Weight {
    std::unique_ptr<kernels::Buffer> buffer;
    kernels::Tensor view;
  };
  explicit ProjectorDevice(kernels::Backend* backend) : backend_(backend) {}

  kernels::Backend* backend_;
  std::map<std::string, Weight> weights_;
};

struct ProjectorDeviceScratch {
  const ProjectorDevice* owner = nullptr;
  std::unique_ptr<kernels::Stream> stream;
  std::unique_ptr<kernels::Buffer> x, y;
  size_t x_floats = 0, y_floats = 0;
};

namespace {

// A [rows, cols] F32 view of `buffer` (no kernels helper: see ProjectorDevice).
kernels::Tensor View2d(const kernels::Buffer& buffer, int64_t rows, int64_t cols) {
  kernels::Tensor t;
  t.data = buffer.data();
  t.dtype = core::DType::kF32;
  t.rank = 2;
  t.shape = {rows, cols, 1, 1};
  return t;
}

// Grows a device buffer to at least `floats` (geometrically; never shrinks).
absl::Status GrowDevice(kernels::Backend& backend, size_t floats,
                        std::unique_ptr<kernels::Buffer>* buffer, size_t* capacity) {
  if (*buffer != nullptr && *capacity >= floats) return absl::OkStatus();
  const size_t want = std::max(floats, 2 * *capacity);
  auto fresh = backend.Allocate(want * sizeof(float));
  if (!fresh.ok()) return fresh.status();
  *buffer = *std::move(fresh);
  *capacity = want;
  return absl::OkStatus();
}

// sum_i a[i] * b[i] with 8 independent partial sums (lets the compiler use SIMD lanes
// without -ffast-math; the fixed order keeps results deterministic).
float Dot(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// y[rows, out] = x[rows, in] @ W^T + b, W [out, in] (PyTorch Linear).
void Linear(const float* x, int rows, int in, const float* w, const float* b, int out, float* y) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<size_t>(r) * in;
    float* yr = y + static_cast<size_t>(r) * out;
    for (int o = 0; o < out; ++o) yr[o] = Dot(xr, w + static_cast<size_t>(o) * in, in) + b[o];
  }
}

// torch.nn.LayerNorm over the last dim (biased variance).
void LayerNorm(const float* x, int rows, int d, const float* w, const float* b, float eps,
               float* y) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<size_t>(r) * d;
    float* yr = y + static_cast<size_t>(r) * d;
    float mean = 0.0f;
    for (int i = 0; i < d; ++i) mean += xr[i];
    mean /= static_cast<float>(d);
    float var = 0.0f;
    for (int i = 0; i < d; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<float>(d);
    const float inv = 1.0f / std::sqrt(var + eps);
    for (int i = 0; i < d; ++i) yr[i] = (xr[i] - mean) * inv * w[i] + b[i];
  }
}

float GeluErf(float x) { return 0.5f * x * (1.0f + std::erf(x * static_cast<float>(M_SQRT1_2))); }

// Unmasked multi-head attention: out[nq, d] = concat_h softmax(q_h k_h^T / sqrt(hd)) v_h.
void Attention(const float* q, int nq, const float* k, const float* v, int nk, int d,
               int num_heads, float* scores, float* out) {
  const int head_dim = d / num_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (int h = 0; h < num_heads; ++h) {
    const int off = h * head_dim;
    for (int i = 0; i < nq; ++i) {
      const float* qi = q + static_cast<size_t>(i) * d + off;
      float max_score = -INFINITY;
      for (int j = 0; j < nk; ++j) {
        const float* kj = k + static_cast<size_t>(j) * d + off;
        scores[j] = Dot(qi, kj, head_dim) * scale;
        max_score = std::max(max_score, scores[j]);
      }
      float sum = 0.0f;
      for (int j = 0; j < nk; ++j) {
        scores[j] = std::exp(scores[j] - max_score);
        sum += scores[j];
      }
      float* oi = out + static_cast<size_t>(i) * d + off;
      std::fill(oi, oi + head_dim, 0.0f);
      for (int j = 0; j < nk; ++j) {
        const float p = scores[j] / sum;
        const float* vj = v + static_cast<size_t>(j) * d + off;
        for (int t = 0; t < head_dim; ++t) oi[t] += p * vj[t];
      }
    }
  }
}

void Grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

absl::Status ValidateTensors(const ProjectorConfig& config, const Fp32TensorMap& tensors) {
  const auto expected = ProjectorTensorShapes(config);
  for (const auto& [name, shape] : expected) {
    auto it = tensors.find(name);
    if (it == tensors.end()) {
      return absl::InvalidArgumentError(absl::StrCat("projector: missing tensor '", name, "'"));
    }
    if (it->second.shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "projector: tensor '", name, "' has shape [", absl::StrJoin(it->second.shape, ","),
          "], expected [", absl::StrJoin(shape, ","), "]"));
    }
  }
  if (tensors.size() != expected.size()) {
    for (const auto& [name, t] : tensors) {
      const bool known = std::any_of(expected.begin(), expected.end(),
                                     [&](const auto& e) { return e.first == name; });
      if (!known) {
        return absl::InvalidArgumentError(
            absl::StrCat("projector: unexpected tensor '", name, "' for input_layers ",
                         config.input_layers));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ProjectorDevice::Linear(ProjectorScratch* s, const float* x, int rows, int in,
                                     const char* weight, const char* bias, int out,
                                     float* y) const {
  auto w = weights_.find(weight);
  auto b = weights_.find(bias);
  if (w == weights_.end() || b == weights_.end()) {
    return absl::InternalError(absl::StrCat("projector device: no tensor ", weight));
  }
  if (s->device == nullptr || s->device->owner != this) {
    // The stream's owner changed (UseBackend again): everything of the old one goes.
    auto fresh = std::make_shared<ProjectorDeviceScratch>();
    fresh->owner = this;
    fresh->stream = backend_->CreateStream();
    s->device = std::move(fresh);
  }
  ProjectorDeviceScratch& d = *s->device;
  const size_t x_floats = static_cast<size_t>(rows) * in,
               y_floats = static_cast<size_t>(rows) * out;
  if (absl::Status st = GrowDevice(*backend_, x_floats, &d.x, &d.x_floats); !st.ok()) return st;
  if (absl::Status st = GrowDevice(*backend_, y_floats, &d.y, &d.y_floats); !st.ok()) return st;
  const kernels::Tensor xt = View2d(*d.x, rows, in), yt = View2d(*d.y, rows, out);
  kernels::Stream& stream = *d.stream;
  if (absl::Status st = backend_->CopyToDevice(stream, x, xt); !st.ok()) return st;
  if (absl::Status st = backend_->MatMul(stream, xt, w->second.view, b->second.view, yt);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = backend_->CopyToHost(stream, yt, y); !st.ok()) return st;
  return backend_->Synchronize(stream);
}

Projector::Projector(ProjectorConfig config, Fp32TensorMap tensors, std::string fingerprint)
    : config_(std::move(config)), tensors_(std::move(tensors)), fingerprint_(std::move(fingerprint)) {
  // The per-layer memory K/V maps, looked up once (MemoryKv runs inside folds).
  for (int l = 0; l < config_.memory_kv_layers; ++l) {
    const std::string k = absl::StrCat("mem_kv.k.", l), v = absl::StrCat("mem_kv.v.", l);
    kv_maps_.push_back({T(k + ".weight"), T(k + ".bias"), T(v + ".weight"), T(v + ".bias")});
  }
  if (config_.has_memory_kv() && config_.memory_kv_hidden > 0) {
    kv_up_ = {T("mem_kv.up.weight"), T("mem_kv.up.bias")};
  }
}

absl::StatusOr<std::unique_ptr<Projector>> Projector::FromTensors(ProjectorConfig config,
                                                                  Fp32TensorMap tensors,
                                                                  std::string fingerprint) {
  if (auto s = ValidateTensors(config, tensors); !s.ok()) return s;
  return std::unique_ptr<Projector>(
      new Projector(std::move(config), std::move(tensors), std::move(fingerprint)));
}

absl::StatusOr<std::unique_ptr<Projector>> Projector::Load(const std::string& dir) {
  auto json_bytes = ReadFileBytes(dir + "/projector.json");
  if (!json_bytes.ok()) return json_bytes.status();
  auto st_bytes = ReadFileBytes(dir + "/projector.safetensors");
  if (!st_bytes.ok()) return st_bytes.status();
  auto config = ParseProjectorConfig(*json_bytes);
  if (!config.ok()) return config.status();
  auto tensors = ParseSafetensors(*st_bytes);
  if (!tensors.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, "/projector.safetensors: ", tensors.status().message()));
  }
  Sha256 sha;
  sha.Update(*json_bytes);
  sha.Update(*st_bytes);
  return FromTensors(*std::move(config), *std::move(tensors), sha.HexDigest());
}

absl::StatusOr<std::unique_ptr<Projector>> Projector::LoadForModel(
    const std::string& dir, std::string_view model_fingerprint, int model_hidden_size) {
  auto projector = Load(dir);
  if (!projector.ok()) return projector.status();
  if (auto s = (*projector)->CheckCompatible(model_fingerprint, model_hidden_size); !s.ok()) {
    return s;
  }
  return projector;
}

absl::Status Projector::UseEngineBackend(kernels::Backend* backend) {
  if (backend == nullptr || backend->Name().rfind("cpu", 0) == 0) return absl::OkStatus();
  return UseBackend(backend);
}

absl::Status Projector::UseBackend(kernels::Backend* backend) {
  if (backend == nullptr) {
    device_.reset();
    return absl::OkStatus();
  }
  auto device = ProjectorDevice::Create(backend, tensors_);
  if (!device.ok()) return device.status();
  device_ = *std::move(device);
  return absl::OkStatus();
}

kernels::Backend* Projector::backend() const {
  return device_ == nullptr ? nullptr : device_->backend();
}

absl::Status Projector::RunLinear(ProjectorScratch* s, const float* x, int rows, int in,
                                  const char* weight, const char* bias, int out, float* y) const {
  if (device_ != nullptr) return device_->Linear(s, x, rows, in, weight, bias, out, y);
  Linear(x, rows, in, T(weight), T(bias), out, y);
  return absl::OkStatus();
}

absl::Status Projector::CheckCompatible(std::string_view model_fingerprint,
                                        int model_hidden_size) const {
  if (config_.model_fingerprint != model_fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat(
        "projector was made for model ", config_.model_fingerprint, ", not for model ",
        std::string(model_fingerprint)));
  }
  if (config_.hidden_size != model_hidden_size) {
    return absl::FailedPreconditionError(absl::StrCat("projector hidden_size ", config_.hidden_size,
                                                      " != model hidden_size ", model_hidden_size));
  }
  return absl::OkStatus();
}

absl::Status Projector::Forward(std::span<const float> mem, std::span<const float> hidden,
                                std::span<float> out, ProjectorScratch* s) const {
  const int d = config_.hidden_size;
  const int num_slots = config_.mem_slots;
  const int in_width = config_.input_width();
  if (mem.size() % d != 0 || hidden.empty() || hidden.size() % in_width != 0 ||
      out.size() != static_cast<size_t>(num_slots) * d) {
    return absl::InvalidArgumentError(absl::StrCat(
        "projector Forward: mem ", mem.size(), ", hidden ", hidden.size(), ", out ", out.size(),
        " floats do not fit d = ", d, ", input width ", in_width, ", M = ", num_slots));
  }
  const int mem_rows = static_cast<int>(mem.size() / d);
  const int num_tokens = static_cast<int>(hidden.size() / in_width);
  const int rows = mem_rows + num_tokens;  // rows of X
  const int f = config_.ffn_size();
  const float eps = config_.ln_eps;
  Grow(s->x, static_cast<size_t>(rows) * d);
  Grow(s->xn, static_cast<size_t>(rows) * d);
  // k and v hold the cross-attention keys (rows of X), then the self-attention ones (M).
  Grow(s->k, static_cast<size_t>(std::max(rows, num_slots)) * d);
  Grow(s->v, static_cast<size_t>(std::max(rows, num_slots)) * d);
  Grow(s->scores, static_cast<size_t>(std::max(rows, num_slots)));
  for (auto* buf : {&s->qn, &s->q, &s->attn, &s->proj, &s->m, &s->mn}) {
    Grow(*buf, static_cast<size_t>(num_slots) * d);
  }
  Grow(s->ffn, static_cast<size_t>(num_slots) * f);

  // X = concat(mem, H'), H' = in_proj(H) for input_layers == 3.
  std::copy(mem.begin(), mem.end(), s->x.begin());
  float* h_dst = s->x.data() + mem.size();
  if (config_.input_layers == 3) {
    KVFOLD_RETURN_IF_ERROR(RunLinear(s, hidden.data(), num_tokens, in_width,
                                               "in_proj.weight", "in_proj.bias", d, h_dst));
  } else {
    std::copy(hidden.begin(), hidden.end(), h_dst);
  }

  // m = queries + CrossAttn(LN_q(queries), LN_x(X))
  const float* queries = T("queries");
  LayerNorm(queries, num_slots, d, T("ln_q.weight"), T("ln_q.bias"), eps, s->qn.data());
  LayerNorm(s->x.data(), rows, d, T("ln_x.weight"), T("ln_x.bias"), eps, s->xn.data());
  KVFOLD_RETURN_IF_ERROR(
      RunLinear(s, s->qn.data(), num_slots, d, "cross.q.weight", "cross.q.bias", d, s->q.data()));
  KVFOLD_RETURN_IF_ERROR(
      RunLinear(s, s->xn.data(), rows, d, "cross.k.weight", "cross.k.bias", d, s->k.data()));
  KVFOLD_RETURN_IF_ERROR(
      RunLinear(s, s->xn.data(), rows, d, "cross.v.weight", "cross.v.bias", d, s->v.data()));
  Attention(s->q.data(), num_slots, s->k.data(), s->v.data(), rows, d, config_.num_heads,
            s->scores.data(), s->attn.data());
  KVFOLD_RETURN_IF_ERROR(RunLinear(s, s->attn.data(), num_slots, d, "cross.o.weight",
                                             "cross.o.bias", d, s->proj.data()));
  for (size_t i = 0; i < static_cast<size_t>(num_slots) * d; ++i) s->m[i] = queries[i] + s->proj[i];

  // m = m + SelfAttn(LN_self(m))
  LayerNorm(s->m.data(), num_slots, d, T("ln_self.weight"), T("ln_self.bias"), eps, s->mn.data());
  KVFOLD_RETURN_IF_ERROR(
      RunLinear(s, s->mn.data(), num_slots, d, "self.q.weight", "self.q.bias", d, s->q.data()));
  KVFOLD_RETURN_IF_ERROR(
      RunLinear(s, s->mn.data(), num_slots, d, "self.k.weight", "self.k.bias", d, s->k.data()));
  KVFOLD_RETURN_IF_ERROR(
      RunLinear(s, s->mn.data(), num_slots, d, "self.v.weight", "self.v.bias", d, s->v.data()));
  Attention(s->q.data(), num_slots, s->k.data(), s->v.data(), num_slots, d, config_.num_heads,
            s->scores.data(), s->attn.data());
  KVFOLD_RETURN_IF_ERROR(RunLinear(s, s->attn.data(), num_slots, d, "self.o.weight",
                                             "self.o.bias", d, s->proj.data()));
  for (size_t i = 0; i < static_cast<size_t>(num_slots) * d; ++i) s->m[i] += s->proj[i];

  // m = m + FFN(LN_ffn(m)), FFN(z) = down(GELU_erf(up(z)))
  LayerNorm(s->m.data(), num_slots, d, T("ln_ffn.weight"), T("ln_ffn.bias"), eps, s->mn.data());
  KVFOLD_RETURN_IF_ERROR(
      RunLinear(s, s->mn.data(), num_slots, d, "ffn.up.weight", "ffn.up.bias", f, s->ffn.data()));
  for (size_t i = 0; i < static_cast<size_t>(num_slots) * f; ++i) s->ffn[i] = GeluErf(s->ffn[i]);
  KVFOLD_RETURN_IF_ERROR(RunLinear(s, s->ffn.data(), num_slots, f, "ffn.down.weight",
                                             "ffn.down.bias", d, s->proj.data()));
  for (size_t i = 0; i < static_cast<size_t>(num_slots) * d; ++i) s->m[i] += s->proj[i];

  // out = LN_out(m)
  LayerNorm(s->m.data(), num_slots, d, T("ln_out.weight"), T("ln_out.bias"), eps, out.data());
  return absl::OkStatus();
}

absl::Status Projector::MemoryKv(std::span<const float> mem, std::span<float> out,
                                 ProjectorScratch* s) const {
  const int d = config_.hidden_size, num_slots = config_.mem_slots;
  const int kv = config_.memory_kv_dim, h = config_.memory_kv_hidden;
  if (!config_.has_memory_kv() || mem.size() != static_cast<size_t>(num_slots) * d ||
      out.size() != static_cast<size_t>(config_.memory_kv_layers) * 2 * num_slots * kv) {
    return absl::InvalidArgumentError(absl::StrCat(
        "projector MemoryKv: mem ", mem.size(), ", out ", out.size(), " floats do not fit M = ",
        num_slots, ", d = ", d, ", ", config_.memory_kv_layers, " layers of ", kv));
  }
  const float* z = mem.data();
  int in = d;
  if (h > 0) {
    Grow(s->kv_hidden, static_cast<size_t>(num_slots) * h);
    Linear(mem.data(), num_slots, d, kv_up_[0], kv_up_[1], h, s->kv_hidden.data());
    for (int i = 0; i < num_slots * h; ++i) s->kv_hidden[i] = GeluErf(s->kv_hidden[i]);
    z = s->kv_hidden.data();
    in = h;
  }
  const size_t part = static_cast<size_t>(num_slots) * kv;
  for (size_t l = 0; l < kv_maps_.size(); ++l) {
    const auto& m = kv_maps_[l];
    Linear(z, num_slots, in, m[0], m[1], kv, out.data() + (2 * l) * part);
    Linear(z, num_slots, in, m[2], m[3], kv, out.data() + (2 * l + 1) * part);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SaveProjector(const std::string& dir, const ProjectorConfig& config,
                                          const Fp32TensorMap& tensors) {
  if (auto s = ValidateTensors(config, tensors); !s.ok()) return s;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  const std::string json = ProjectorConfigJson(config);
  const std::string st = SerializeSafetensorsF32(tensors);
  if (auto s = WriteFileBytes(dir + "/projector.json", json); !s.ok()) return s;
  if (auto s = WriteFileBytes(dir + "/projector.safetensors", st); !s.ok()) return s;
  Sha256 sha;
  sha.Update(json);
  sha.Update(st);
  return sha.HexDigest();
}

}  // namespace kvfold::memory
