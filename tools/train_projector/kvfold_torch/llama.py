"""An independent fp32 PyTorch implementation of the Llama family, written from the HF
reference semantics (not from kvfold's C++ engine), used as the parity reference and as
the frozen base model for projector training.

Loads:
  * HF directories: config.json + model.safetensors (or a sharded index), F32/F16/BF16.
    LlamaForCausalLM (rope_scaling llama3/linear/dynamic), MistralForCausalLM
    (sliding_window), Qwen2ForCausalLM (q/k/v biases), tie_word_embeddings, head_dim, GQA.
  * llama2.c checkpoints (e.g. stories260K.bin). Their wq/wk rows are permuted exactly as
    HF's convert_llama_weights_to_hf does, so one (rotate_half) RoPE convention serves all.

The core entry point is Llama.forward(embeds, positions, mask) so that memory mode (memory
vectors fed as embeddings, custom masks) and windowed modes reuse the same layers.
"""
import json
import math
import os
import struct
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from . import safetensors_io


@dataclass
class LlamaConfig:
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    head_dim: int = 0
    max_position: int = 2048
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict = field(default_factory=dict)
    sliding_window: int = 0          # Mistral; 0 = none
    qkv_bias: bool = False
    tie_embeddings: bool = False
    bos_id: int = 1
    eos_id: int = 2
    architecture: str = "LlamaForCausalLM"

    def __post_init__(self):
        if not self.head_dim:
            self.head_dim = self.hidden_size // self.num_heads


def _inv_freq(cfg: LlamaConfig, seq_len: int):
    """RoPE inverse frequencies, HF semantics for each rope_scaling type."""
    hd = cfg.head_dim
    base = cfg.rope_theta
    sc = cfg.rope_scaling or {}
    kind = sc.get("rope_type", sc.get("type", "default")) if sc else "default"
    if kind == "dynamic":
        factor = float(sc["factor"])
        if seq_len > cfg.max_position:
            base = base * ((factor * seq_len / cfg.max_position) - (factor - 1)) ** (hd / (hd - 2))
    inv = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.int64).to(torch.float64) / hd))
    if kind == "linear":
        inv = inv / float(sc["factor"])
    elif kind == "llama3":
        factor = float(sc["factor"])
        low = float(sc.get("low_freq_factor", 1.0))
        high = float(sc.get("high_freq_factor", 4.0))
        old_ctx = float(sc.get("original_max_position_embeddings", 8192))
        low_wl = old_ctx / low
        high_wl = old_ctx / high
        wavelen = 2 * math.pi / inv
        inv_l = torch.where(wavelen > low_wl, inv / factor, inv)
        smooth = (old_ctx / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
        is_medium = (wavelen >= high_wl) & (wavelen <= low_wl)
        inv = torch.where(is_medium, smoothed, inv_l)
    return inv.to(torch.float32)


def rope_cos_sin(cfg: LlamaConfig, positions: torch.Tensor, seq_len=None):
    """cos, sin of shape [T, head_dim] for integer positions [T] (rotate_half layout)."""
    if seq_len is None:
        seq_len = int(positions.max().item()) + 1 if positions.numel() else 1
    inv = _inv_freq(cfg, seq_len)
    ang = positions.to(torch.float32)[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin):
    """x [B, H, T, hd]; cos/sin [T, hd]."""
    return x * cos + _rotate_half(x) * sin


def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(var + eps) * w


class Llama(torch.nn.Module):
    """Frozen-weight Llama. Parameters are plain tensors in self.w (HF names)."""

    def __init__(self, cfg: LlamaConfig, weights: dict, dtype=torch.float32):
        super().__init__()
        self.cfg = cfg
        self.w = {k: v.to(dtype) for k, v in weights.items()}
        if "lm_head.weight" not in self.w:
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]
        for k, v in self.w.items():
            v.requires_grad_(False)

    def to_device(self, device, dtype=None):
        """Moves the frozen weights (optionally cast, e.g. bf16 for a 1B-8B model on one
        GPU); returns self. Activations follow the input embeddings' device."""
        for k, v in self.w.items():
            self.w[k] = v.to(device=device, dtype=dtype or v.dtype)
        return self

    # -- pieces -------------------------------------------------------------------------
    def embed(self, tokens):
        return F.embedding(tokens, self.w["model.embed_tokens.weight"])

    def _qkv(self, i, h):
        p = f"model.layers.{i}.self_attn."
        cfg = self.cfg
        q = F.linear(h, self.w[p + "q_proj.weight"], self.w.get(p + "q_proj.bias"))
        k = F.linear(h, self.w[p + "k_proj.weight"], self.w.get(p + "k_proj.bias"))
        v = F.linear(h, self.w[p + "v_proj.weight"], self.w.get(p + "v_proj.bias"))
        B, T, _ = h.shape
        q = q.view(B, T, cfg.num_heads, cfg.head_dim).transpose(1, 2)
        k = k.view(B, T, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        v = v.view(B, T, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        return q, k, v

    def _mlp(self, i, h):
        p = f"model.layers.{i}.mlp."
        g = F.linear(h, self.w[p + "gate_proj.weight"])
        u = F.linear(h, self.w[p + "up_proj.weight"])
        return F.linear(F.silu(g) * u, self.w[p + "down_proj.weight"])

    def forward(self, x, positions, mask, sink=None, collect_layers=1, logits_from=0,
                sink_rows=None, mem_kv=None):
        """x: input embeddings [B, T, d]; positions: int [T]; mask: bool [T, T] (True =
        may attend) or [B, T, T].
        sink: optional (S, Wm): StreamingLLM sink mode for a plain token stream; rows
          t >= S + Wm see the S sink keys at their cache positions 0..S-1 from a query at
          position S + Wm - 1 (the mask must allow the first S columns for those rows).
          sink_rows: optional bool [T] overriding which rows are such rows.
        logits_from: logits are computed only for rows >= logits_from (saves work).
        mem_kv: optional (c0, [(dk, dv) per layer], dk/dv [B, M, kv_dim]): the keys and
          values of rows c0..c0 + M - 1 (memory slots, position 0) read as k + dk, v + dv
          by the rows after them (the window); those rows themselves see the plain k, v.
        Returns (logits [B, T - logits_from, V], hiddens): hiddens = list of the residual outputs of the
        last `collect_layers` layers (oldest first), before the final norm."""
        cfg = self.cfg
        dev = x.device
        positions, mask = positions.to(dev), mask.to(dev)
        cos, sin = (t.to(dev) for t in rope_cos_sin(cfg, positions.cpu()))
        rep = cfg.num_heads // cfg.num_kv_heads
        scale = 1.0 / math.sqrt(cfg.head_dim)
        if mask.dim() == 2:
            mask = mask[None]
        mask = mask[:, None]  # [B|1, 1, T, T]
        if sink is not None:
            S, Wm = sink
            T = x.shape[1]
            fixed = torch.full((T,), S + Wm - 1, dtype=torch.int64)
            cos_f, sin_f = (t.to(dev) for t in
                            rope_cos_sin(cfg, fixed, seq_len=int(positions.max()) + 1))
            if sink_rows is None:
                sink_rows = torch.arange(T) >= S + Wm
            sink_rows = sink_rows.to(dev)[None, None, :, None]
        hiddens = []
        if mem_kv is not None:
            c0, deltas = mem_kv
            nm = deltas[0][0].shape[1]
            later = (torch.arange(x.shape[1], device=dev) >= c0 + nm)[None, None, :, None]
        for i in range(cfg.num_layers):
            p = f"model.layers.{i}."
            h = rms_norm(x, self.w[p + "input_layernorm.weight"], cfg.rms_norm_eps)
            q, k, v = self._qkv(i, h)
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
            qr = apply_rope(q, cos, sin)
            kr = apply_rope(k, cos, sin)
            scores = (qr @ kr.transpose(-1, -2)) * scale
            if sink is not None:
                qf = apply_rope(q, cos_f, sin_f)
                ks = kr[:, :, :S]  # sink keys at positions 0..S-1
                s_sink = (qf @ ks.transpose(-1, -2)) * scale  # [B, H, T, S]
                head = torch.where(sink_rows, s_sink, scores[..., :S])
                scores = torch.cat([head, scores[..., S:]], dim=-1)
            if mem_kv is not None:
                dk, dv = (self._heads(t, rep) for t in deltas[i])
                qd = qr if sink is None else torch.where(sink_rows, qf, qr)
                extra = torch.where(later, (qd @ dk.transpose(-1, -2)) * scale, 0.0)
                scores = torch.cat([scores[..., :c0], scores[..., c0:c0 + nm] + extra,
                                    scores[..., c0 + nm:]], dim=-1)
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
            att = torch.softmax(scores, dim=-1)
            o = att @ v
            if mem_kv is not None:
                o = o + torch.where(later, att[..., c0:c0 + nm], 0.0) @ dv
            o = o.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)
            x = x + F.linear(o, self.w[p + "self_attn.o_proj.weight"],
                             self.w.get(p + "self_attn.o_proj.bias"))
            h = rms_norm(x, self.w[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
            x = x + self._mlp(i, h)
            if i >= cfg.num_layers - collect_layers:
                hiddens.append(x)
        xn = rms_norm(x[:, logits_from:], self.w["model.norm.weight"], cfg.rms_norm_eps)
        logits = F.linear(xn, self.w["lm_head.weight"])
        return logits, hiddens

    def _heads(self, t, rep):
        """[B, M, kv_dim] -> [B, num_heads, M, head_dim] (KV heads repeated for GQA)."""
        B, M, _ = t.shape
        t = t.to(self.w["model.embed_tokens.weight"].dtype)
        t = t.view(B, M, self.cfg.num_kv_heads, self.cfg.head_dim).transpose(1, 2)
        return t.repeat_interleave(rep, dim=1)

    def causal_mask(self, T):
        m = torch.ones(T, T, dtype=torch.bool).tril()
        if self.cfg.sliding_window:
            idx = torch.arange(T)
            m &= (idx[:, None] - idx[None, :]) < self.cfg.sliding_window
        return m

    def full_logits(self, tokens):
        """tokens: int list or [B, T] tensor -> logits [B, T, V] with full causal context."""
        t = torch.as_tensor(tokens, dtype=torch.int64)
        if t.dim() == 1:
            t = t[None]
        T = t.shape[1]
        logits, _ = self.forward(self.embed(t), torch.arange(T), self.causal_mask(T))
        return logits


# -- loaders -------------------------------------------------------------------------------

def config_from_hf(d: dict) -> LlamaConfig:
    arch = (d.get("architectures") or ["LlamaForCausalLM"])[0]
    if arch not in ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"):
        raise ValueError(f"unsupported architecture {arch}")
    nh = d["num_attention_heads"]
    sw = d.get("sliding_window") or 0
    if arch == "Qwen2ForCausalLM" and not d.get("use_sliding_window", False):
        sw = 0
    if arch == "LlamaForCausalLM":
        sw = 0
    return LlamaConfig(
        hidden_size=d["hidden_size"], intermediate_size=d["intermediate_size"],
        num_layers=d["num_hidden_layers"], num_heads=nh,
        num_kv_heads=d.get("num_key_value_heads") or nh, vocab_size=d["vocab_size"],
        head_dim=d.get("head_dim") or d["hidden_size"] // nh,
        max_position=d.get("max_position_embeddings", 2048),
        rms_norm_eps=d.get("rms_norm_eps", 1e-5), rope_theta=d.get("rope_theta", 10000.0),
        rope_scaling=d.get("rope_scaling") or {}, sliding_window=sw,
        qkv_bias=(arch == "Qwen2ForCausalLM") or bool(d.get("attention_bias", False)),
        tie_embeddings=bool(d.get("tie_word_embeddings", False)),
        bos_id=d.get("bos_token_id", 1) if d.get("bos_token_id") is not None else 1,
        eos_id=d.get("eos_token_id", 2) if isinstance(d.get("eos_token_id"), int) else 2,
        architecture=arch)


def load_hf(path: str) -> Llama:
    with open(os.path.join(path, "config.json")) as f:
        cfg = config_from_hf(json.load(f))
    weights = {}
    single = os.path.join(path, "model.safetensors")
    if os.path.exists(single):
        weights, _ = safetensors_io.load(single)
    else:
        with open(os.path.join(path, "model.safetensors.index.json")) as f:
            idx = json.load(f)
        for shard in sorted(set(idx["weight_map"].values())):
            w, _ = safetensors_io.load(os.path.join(path, shard))
            weights.update(w)
    if cfg.tie_embeddings:
        weights.pop("lm_head.weight", None)
    return Llama(cfg, weights)


def _permute_rope(w, n_heads, dim_out, dim_in):
    """llama2.c interleaved-pair rows -> HF rotate_half rows (convert_llama_weights_to_hf)."""
    return w.view(n_heads, dim_out // n_heads // 2, 2, dim_in).transpose(1, 2).reshape(dim_out, dim_in)


def load_llama2c(path: str) -> Llama:
    with open(path, "rb") as f:
        data = f.read()
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = struct.unpack("<7i", data[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    arr = np.frombuffer(data, dtype="<f4", offset=28)
    pos = 0
    hd = dim // n_heads

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        t = torch.from_numpy(np.array(arr[pos:pos + n])).view(*shape)
        pos += n
        return t

    emb = take(vocab, dim)
    rms_att = take(n_layers, dim)
    wq = take(n_layers, dim, dim)
    wk = take(n_layers, n_kv * hd, dim)
    wv = take(n_layers, n_kv * hd, dim)
    wo = take(n_layers, dim, dim)
    rms_ffn = take(n_layers, dim)
    w1 = take(n_layers, hidden, dim)
    w2 = take(n_layers, dim, hidden)
    w3 = take(n_layers, hidden, dim)
    rms_final = take(dim)
    pos += seq_len * hd // 2 * 2  # freq_cis_real, freq_cis_imag (unused)
    w = {"model.embed_tokens.weight": emb, "model.norm.weight": rms_final}
    if not shared:
        w["lm_head.weight"] = take(vocab, dim)
    for i in range(n_layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = rms_att[i]
        w[p + "self_attn.q_proj.weight"] = _permute_rope(wq[i], n_heads, dim, dim)
        w[p + "self_attn.k_proj.weight"] = _permute_rope(wk[i], n_kv, n_kv * hd, dim)
        w[p + "self_attn.v_proj.weight"] = wv[i]
        w[p + "self_attn.o_proj.weight"] = wo[i]
        w[p + "post_attention_layernorm.weight"] = rms_ffn[i]
        w[p + "mlp.gate_proj.weight"] = w1[i]
        w[p + "mlp.down_proj.weight"] = w2[i]
        w[p + "mlp.up_proj.weight"] = w3[i]
    cfg = LlamaConfig(hidden_size=dim, intermediate_size=hidden, num_layers=n_layers,
                      num_heads=n_heads, num_kv_heads=n_kv, vocab_size=vocab,
                      max_position=seq_len, tie_embeddings=shared)
    return Llama(cfg, w)


def load_model(path: str) -> Llama:
    """An HF directory, or a llama2.c .bin file."""
    if os.path.isdir(path):
        return load_hf(path)
    return load_llama2c(path)


def random_model(cfg: LlamaConfig, seed=0, scale=0.2) -> Llama:
    """A random model with HF tensor names (Python-side tests only)."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g) * scale

    d, hd = cfg.hidden_size, cfg.head_dim
    w = {"model.embed_tokens.weight": r(cfg.vocab_size, d) * 5,
         "model.norm.weight": 1 + r(d)}
    if not cfg.tie_embeddings:
        w["lm_head.weight"] = r(cfg.vocab_size, d)
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = 1 + r(d)
        w[p + "post_attention_layernorm.weight"] = 1 + r(d)
        w[p + "self_attn.q_proj.weight"] = r(cfg.num_heads * hd, d)
        w[p + "self_attn.k_proj.weight"] = r(cfg.num_kv_heads * hd, d)
        w[p + "self_attn.v_proj.weight"] = r(cfg.num_kv_heads * hd, d)
        w[p + "self_attn.o_proj.weight"] = r(d, cfg.num_heads * hd)
        if cfg.qkv_bias:
            w[p + "self_attn.q_proj.bias"] = r(cfg.num_heads * hd)
            w[p + "self_attn.k_proj.bias"] = r(cfg.num_kv_heads * hd)
            w[p + "self_attn.v_proj.bias"] = r(cfg.num_kv_heads * hd)
        w[p + "mlp.gate_proj.weight"] = r(cfg.intermediate_size, d)
        w[p + "mlp.up_proj.weight"] = r(cfg.intermediate_size, d)
        w[p + "mlp.down_proj.weight"] = r(d, cfg.intermediate_size)
    return Llama(cfg, w)
