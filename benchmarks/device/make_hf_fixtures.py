#!/usr/bin/env python3
"""Writes tiny random HuggingFace checkpoints and their reference outputs for turnrl's tests.

    python3 benchmarks/device/make_hf_fixtures.py [--out tests/data/hf] [--require-transformers]

For each family (Qwen2 with q/k/v bias and tied embeddings, Qwen3 with q/k norms and an explicit
head_dim, Llama-3.2 with llama3 rope scaling) it writes <out>/<family>/:
    config.json, model.safetensors   the checkpoint (F32, BF16 and F16 weights respectively)
    reference.safetensors            float32 logits of every prompt ("logits.<i>", [T, vocab])
    reference.json                   prompts, 64-token greedy continuations, and which generator
                                     produced them

The weights are drawn from a seeded generator, independent of any library, so every generator
writes the same checkpoint. The reference outputs come from `transformers` when it is importable
(the GPU machine: save_pretrained, forward, generate); without it, from the pure-torch
reimplementation below, which follows transformers' modeling_llama / modeling_qwen2 /
modeling_qwen3 line by line (eager attention), and safetensors written by hand. Regenerating with
transformers must leave turnrl's tests passing (tests/model/test_hf_decoder.cpp).

    python3 benchmarks/device/make_hf_fixtures.py --full-size /tmp/hf-full   (GPU + transformers)

writes random bf16 models of the real shapes of Qwen3-0.6B, Qwen2.5-1.5B and Llama-3.2-1B the same
way (save_pretrained; reference logits of a bf16 forward on the GPU, 128-token greedy
continuations); TURNRL_HF_FULL_FIXTURES=/tmp/hf-full build-device/bin/test_model_cuda compares
turnrl's bf16 decoder on the GPU with them (tests/model/test_hf_decoder_cuda.cpp).
"""
import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

GREEDY_TOKENS = 64
PROMPTS = [[1, 17, 42, 99, 5, 230, 64, 8, 150, 3, 77, 201],
           [250, 4, 4, 4, 19, 88, 120, 7, 300, 12, 45, 46]]

COMMON = dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, hidden_act="silu",
              max_position_embeddings=256, attention_dropout=0.0, bos_token_id=1, eos_token_id=2)

FAMILIES = {
    "qwen2": dict(architecture="Qwen2ForCausalLM", model_type="qwen2", dtype=torch.float32,
                  config=dict(COMMON, rope_theta=1000000.0, tie_word_embeddings=True,
                              use_sliding_window=False, sliding_window=None, max_window_layers=2)),
    "qwen3": dict(architecture="Qwen3ForCausalLM", model_type="qwen3", dtype=torch.bfloat16,
                  config=dict(COMMON, head_dim=32, rope_theta=1000000.0, tie_word_embeddings=False,
                              attention_bias=False, use_sliding_window=False, sliding_window=None,
                              max_window_layers=2)),
    "llama": dict(architecture="LlamaForCausalLM", model_type="llama", dtype=torch.float16,
                  config=dict(COMMON, rope_theta=500000.0, tie_word_embeddings=False,
                              attention_bias=False, mlp_bias=False,
                              rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                high_freq_factor=4.0,
                                                original_max_position_embeddings=64))),
}

DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
SAFETENSORS_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


FULL_SIZE_TOKENS = 128
FULL_SIZE = {
    "qwen3-0.6b": dict(architecture="Qwen3ForCausalLM", model_type="qwen3", config=dict(
        vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, rope_theta=1000000.0, tie_word_embeddings=True,
        max_position_embeddings=40960, rms_norm_eps=1e-6, hidden_act="silu", attention_bias=False,
        use_sliding_window=False, bos_token_id=151643, eos_token_id=151645)),
    "qwen2.5-1.5b": dict(architecture="Qwen2ForCausalLM", model_type="qwen2", config=dict(
        vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
        num_key_value_heads=2, rope_theta=1000000.0, tie_word_embeddings=True, max_position_embeddings=32768,
        rms_norm_eps=1e-6, hidden_act="silu", use_sliding_window=False, bos_token_id=151643, eos_token_id=151643)),
    "llama-3.2-1b": dict(architecture="LlamaForCausalLM", model_type="llama", config=dict(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, rope_theta=500000.0, tie_word_embeddings=True,
        max_position_embeddings=131072, rms_norm_eps=1e-5, hidden_act="silu", attention_bias=False, mlp_bias=False,
        rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position_embeddings=8192), bos_token_id=128000, eos_token_id=128001)),
}


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def random_state(family, seed):
    """Weights of transformers' names; large enough that greedy decoding has no near-ties."""
    spec = FAMILIES[family]
    cfg = spec["config"]
    g = torch.Generator().manual_seed(seed)
    hidden, inter, d = cfg["hidden_size"], cfg["intermediate_size"], head_dim(cfg)
    q_width, kv_width = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d

    def linear(out_features, in_features):
        return 2 * torch.randn(out_features, in_features, generator=g) / math.sqrt(in_features)

    def norm(width):
        return 1 + 0.1 * torch.randn(width, generator=g)

    # Small embeddings next to the layers keep a tied head from repeating the current token.
    state = {"model.embed_tokens.weight": 0.3 * torch.randn(cfg["vocab_size"], hidden, generator=g)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        state[p + "self_attn.q_proj.weight"] = linear(q_width, hidden)
        state[p + "self_attn.k_proj.weight"] = linear(kv_width, hidden)
        state[p + "self_attn.v_proj.weight"] = linear(kv_width, hidden)
        state[p + "self_attn.o_proj.weight"] = linear(hidden, q_width)
        if family == "qwen2":
            for name, width in (("q", q_width), ("k", kv_width), ("v", kv_width)):
                state[p + f"self_attn.{name}_proj.bias"] = 0.1 * torch.randn(width, generator=g)
        if family == "qwen3":
            state[p + "self_attn.q_norm.weight"] = norm(d)
            state[p + "self_attn.k_norm.weight"] = norm(d)
        state[p + "mlp.gate_proj.weight"] = linear(inter, hidden)
        state[p + "mlp.up_proj.weight"] = linear(inter, hidden)
        state[p + "mlp.down_proj.weight"] = linear(hidden, inter)
        state[p + "input_layernorm.weight"] = norm(hidden)
        state[p + "post_attention_layernorm.weight"] = norm(hidden)
    state["model.norm.weight"] = norm(hidden)
    if not cfg["tie_word_embeddings"]:
        state["lm_head.weight"] = linear(cfg["vocab_size"], hidden)
    # The checkpoint's dtype rounds the weights; the reference runs on the rounded values in float32.
    return {k: v.to(spec["dtype"]) for k, v in state.items()}


# ---- the pure-torch reference (transformers' modeling code, eager attention, float32) ----

def rms_norm(x, weight, eps):
    input_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return weight * h.to(input_dtype)


def inverse_frequencies(cfg):
    d = head_dim(cfg)
    base = cfg["rope_theta"]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64).to(dtype=torch.float) / d))
    scaling = cfg.get("rope_scaling")
    if not scaling:
        return inv_freq
    assert scaling["rope_type"] == "llama3"
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context_len = scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low
    high_freq_wavelen = old_context_len / high
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low) / (high - low)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def reference_forward(family, state, input_ids):
    cfg = FAMILIES[family]["config"]
    w = {k: v.to(torch.float32) for k, v in state.items()}
    batch, length = input_ids.shape
    d = head_dim(cfg)
    heads, kv_heads, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rms_norm_eps"]

    position_ids = torch.arange(length)[None].expand(batch, length)
    inv_freq_expanded = inverse_frequencies(cfg)[None, :, None].float().expand(batch, -1, 1)
    freqs = (inv_freq_expanded.float() @ position_ids[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]
    causal = torch.full((length, length), torch.finfo(torch.float32).min).triu(1)

    x = w["model.embed_tokens.weight"][input_ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        residual = x
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)

        def project(name, width):
            out = F.linear(h, w[p + f"self_attn.{name}_proj.weight"], w.get(p + f"self_attn.{name}_proj.bias"))
            out = out.view(batch, length, width, d)
            if family == "qwen3" and name in ("q", "k"):
                out = rms_norm(out, w[p + f"self_attn.{name}_norm.weight"], eps)
            return out.transpose(1, 2)

        q, k, v = project("q", heads), project("k", kv_heads), project("v", kv_heads)
        q = (q * cos) + (rotate_half(q) * sin)
        k = (k * cos) + (rotate_half(k) * sin)
        groups = heads // kv_heads
        k = k[:, :, None].expand(batch, kv_heads, groups, length, d).reshape(batch, heads, length, d)
        v = v[:, :, None].expand(batch, kv_heads, groups, length, d).reshape(batch, heads, length, d)
        scores = torch.matmul(q, k.transpose(2, 3)) * d ** -0.5 + causal
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        attn = torch.matmul(probs, v).transpose(1, 2).reshape(batch, length, -1)
        x = residual + F.linear(attn, w[p + "self_attn.o_proj.weight"])

        residual = x
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = F.linear(h, w[p + "mlp.gate_proj.weight"])
        up = F.linear(h, w[p + "mlp.up_proj.weight"])
        x = residual + F.linear(F.silu(gate) * up, w[p + "mlp.down_proj.weight"])
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return F.linear(x, head)


def reference_greedy(family, state, prompt):
    ids = torch.tensor([prompt])
    for _ in range(GREEDY_TOKENS):
        next_token = reference_forward(family, state, ids)[0, -1].argmax()
        ids = torch.cat([ids, next_token.view(1, 1)], dim=1)
    return ids[0, len(prompt):].tolist()


def write_safetensors(path, tensors, metadata=None):
    header, offset, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = metadata
    for name, tensor in tensors.items():
        t = tensor.contiguous()
        # Raw bytes through an int16/int32 view: numpy has no bfloat16.
        raw = t.view(torch.int16 if t.element_size() == 2 else torch.int32).numpy().tobytes()
        header[name] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for blob in blobs:
            out.write(blob)


def hand_written_config(family):
    spec = FAMILIES[family]
    cfg = dict(spec["config"])
    cfg.update(architectures=[spec["architecture"]], model_type=spec["model_type"],
               torch_dtype=DTYPE_NAMES[spec["dtype"]])
    if "rope_scaling" not in cfg:
        cfg["rope_scaling"] = None
    return cfg


def with_transformers(family, state, folder):
    import transformers

    spec = FAMILIES[family]
    config_class = getattr(transformers, spec["architecture"].replace("ForCausalLM", "Config"))
    model_class = getattr(transformers, spec["architecture"])
    # The 4.x layout on purpose: transformers 5 must read it (and writes its own on save).
    config = config_class.from_dict(hand_written_config(family))
    model = model_class(config).to(spec["dtype"]).eval()
    model.load_state_dict(state, strict=not spec["config"]["tie_word_embeddings"])
    model.generation_config.eos_token_id = None  # 64 tokens whatever is drawn
    model.save_pretrained(folder, safe_serialization=True)
    # References from the saved folder as a user loads it. Not model.to(float32): casting a built
    # model to bf16/f16 also rounds its rotary inv_freq buffer, which from_pretrained keeps float32.
    model = model_class.from_pretrained(folder, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    logits, greedy = [], []
    with torch.no_grad():
        for prompt in PROMPTS:
            ids = torch.tensor([prompt])
            logits.append(model(input_ids=ids).logits[0].float())
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=GREEDY_TOKENS, pad_token_id=0)
            greedy.append(out[0, len(prompt):].tolist())
    return f"transformers {transformers.__version__} (torch {torch.__version__})", logits, greedy


def with_reference(family, state, folder):
    write_safetensors(os.path.join(folder, "model.safetensors"), state, {"format": "pt"})
    with open(os.path.join(folder, "config.json"), "w") as out:
        json.dump(hand_written_config(family), out, indent=2)
    with torch.no_grad():
        logits = [reference_forward(family, state, torch.tensor([p]))[0] for p in PROMPTS]
        greedy = [reference_greedy(family, state, p) for p in PROMPTS]
    return (f"pure-torch reference of transformers' modeling code (make_hf_fixtures.py, torch {torch.__version__})",
            logits, greedy)


def forced_logits(model, sequence, prompt_length):
    """Logits [tokens, vocab] of one forward over `sequence` at the positions that predict its tokens
    after the prompt (position t - 1 predicts token t)."""
    logits = model(input_ids=sequence.unsqueeze(0)).logits[0]
    return logits[prompt_length - 1:-1]


def full_size(out):
    """bf16 models of real shapes on the GPU, references from transformers (no fallback)."""
    import transformers

    device = torch.device("cuda")
    for seed, (name, spec) in enumerate(FULL_SIZE.items()):
        folder = os.path.join(out, name)
        os.makedirs(folder, exist_ok=True)
        cfg = dict(spec["config"], architectures=[spec["architecture"]], model_type=spec["model_type"])
        config_class = getattr(transformers, spec["architecture"].replace("ForCausalLM", "Config"))
        config = config_class.from_dict(cfg)
        torch.manual_seed(seed)
        model = getattr(transformers, spec["architecture"])(config).to(device=device, dtype=torch.bfloat16).eval()
        g = torch.Generator(device=device).manual_seed(seed)
        with torch.no_grad():  # the same recipe as random_state: no near-ties in greedy decoding
            for pname, p in model.named_parameters():
                if pname.endswith("norm.weight"):
                    p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g, device=device))
                elif pname.endswith("bias"):
                    p.copy_(0.1 * torch.randn(p.shape, generator=g, device=device))
                elif "embed_tokens" in pname:
                    p.copy_(0.3 * torch.randn(p.shape, generator=g, device=device))
                else:
                    p.copy_(2 * torch.randn(p.shape, generator=g, device=device) / math.sqrt(p.shape[1]))
        model.save_pretrained(folder, safe_serialization=True)
        del model
        # As a user loads it (see with_transformers: a cast model's inv_freq is rounded to bf16).
        model = getattr(transformers, spec["architecture"]).from_pretrained(
            folder, dtype=torch.bfloat16).to(device).eval()
        model.generation_config.eos_token_id = None
        tensors, greedy = {}, []
        with torch.no_grad():
            for i, prompt in enumerate(PROMPTS):
                ids = torch.tensor([prompt], device=device)
                tensors[f"logits.{i}"] = model(input_ids=ids).logits[0].float().cpu()
                generated = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                           max_new_tokens=FULL_SIZE_TOKENS, pad_token_id=0)
                greedy.append(generated[0, len(prompt):].tolist())
                # Teacher-forced: one forward over prompt + greedy tokens, the logits that predict each
                # greedy token (bf16 values, stored as bf16 without loss).
                tensors[f"forced.{i}"] = forced_logits(model, generated[0], len(prompt)).cpu()
        del model
        torch.cuda.empty_cache()
        # The same weights in float32: the truth both bf16 implementations round away from. The
        # chaotic weights of random_state's recipe make bf16 rounding grow through the layers, so
        # turnrl is held to transformers' own bf16 distance from this (test_hf_decoder_cuda.cpp).
        model = getattr(transformers, spec["architecture"]).from_pretrained(
            folder, dtype=torch.float32).to(device).eval()
        with torch.no_grad():
            for i, prompt in enumerate(PROMPTS):
                ids = torch.tensor([prompt], device=device)
                tensors[f"logits_fp32.{i}"] = model(input_ids=ids).logits[0].float().cpu()
                sequence = torch.tensor(prompt + greedy[i], device=device)
                tensors[f"forced_fp32.{i}"] = forced_logits(model, sequence, len(prompt)).float().cpu()
        write_safetensors(os.path.join(folder, "reference.safetensors"),
                          {name: t.contiguous() for name, t in tensors.items()})
        with open(os.path.join(folder, "reference.json"), "w") as out_file:
            json.dump({"generator": f"transformers {transformers.__version__} bf16 on {torch.cuda.get_device_name()}",
                       "prompts": PROMPTS, "greedy": greedy, "greedy_tokens": FULL_SIZE_TOKENS}, out_file, indent=1)
        print(f"{name}: written to {folder}")
        del model
        torch.cuda.empty_cache()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "hf"))
    parser.add_argument("--require-transformers", action="store_true",
                        help="fail instead of falling back to the pure-torch reference")
    parser.add_argument("--full-size", metavar="DIR",
                        help="write bf16 models of real shapes to DIR instead (needs transformers and a GPU)")
    args = parser.parse_args()
    if args.full_size:
        return full_size(args.full_size)
    try:
        import transformers  # noqa: F401
        have_transformers = True
    except ImportError:
        if args.require_transformers:
            sys.exit("transformers is not importable")
        have_transformers = False

    for seed, family in enumerate(FAMILIES):
        folder = os.path.join(args.out, family)
        os.makedirs(folder, exist_ok=True)
        state = random_state(family, seed)
        make = with_transformers if have_transformers else with_reference
        generator, logits, greedy = make(family, state, folder)
        # Cross-check: transformers and the reimplementation must agree on these weights.
        if have_transformers:
            with torch.no_grad():
                mine = reference_forward(family, state, torch.tensor([PROMPTS[0]]))[0]
            print(f"{family}: max |transformers - reference| logits = {(mine - logits[0]).abs().max():.3g}")
        write_safetensors(os.path.join(folder, "reference.safetensors"),
                          {f"logits.{i}": l.contiguous() for i, l in enumerate(logits)})
        with open(os.path.join(folder, "reference.json"), "w") as out:
            json.dump({"generator": generator, "prompts": PROMPTS, "greedy": greedy,
                       "greedy_tokens": GREEDY_TOKENS}, out, indent=1)
        print(f"{family}: {generator}; greedy[0][:8] = {greedy[0][:8]}")


if __name__ == "__main__":
    main()
