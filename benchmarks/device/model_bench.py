#!/usr/bin/env python3
"""The model and loops of benchmarks/model_bench.cpp in Python PyTorch, for the same-run comparison
on the GPU machine: the same decoder (RMSNorm in fp32, rotary positions, fused QKV and SwiGLU
gate/up projections, scaled_dot_product_attention, untied head), the same training step
(forward_logp with entropy, -mean(logp), backward) and the same KV-cache sampling loop (inverse-CDF
draws from CPU uniforms, one host check per step for stopped rows). Prints the same table.

    python3 benchmarks/device/model_bench.py [--device cuda] [--dtype bf16|fp32] [--size tiny|small|base] [--quick]
Defaults follow model_bench: cpu -> fp32, small; cuda -> bf16, base (~300M parameters).
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# (model, (train batch, train length), (gen batch, prompt, new tokens), time the recompute path)
SIZES = {
    "tiny": (dict(vocab=263, d_model=128, layers=2, heads=4, max_seq=512), (4, 128), (8, 32, 32), True),
    "small": (dict(vocab=263, d_model=256, layers=4, heads=4, max_seq=1024), (4, 256), (8, 64, 64), False),
    "base": (dict(vocab=263, d_model=1024, layers=24, heads=16, max_seq=4096), (8, 1024), (64, 256, 256), False),
}
NORM_EPS = 1e-5
ROPE_THETA = 10000.0


def ffn_width(d_model):
    return (8 * d_model // 3 + 63) // 64 * 64


def num_parameters(vocab, d_model, layers, **_):
    d, f = d_model, ffn_width(d_model)
    return vocab * d + layers * (4 * d * d + 3 * d * f + 2 * d) + d + d * vocab


def forward_flops_per_token(attended, vocab, d_model, layers, **_):
    d, f = d_model, ffn_width(d_model)
    return 2 * (layers * (4 * d * d + 3 * d * f) + d * vocab) + 4 * layers * d * attended


def rms_norm(x, weight):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + NORM_EPS) * weight.float()).to(x.dtype)


def rotary_angles(positions, head_dim):
    half = head_dim // 2
    inv_freq = torch.pow(ROPE_THETA, -torch.arange(half, dtype=torch.float32, device=positions.device) * 2.0 / head_dim)
    angles = positions.float().unsqueeze(-1) * inv_freq
    return angles.cos().unsqueeze(1), angles.sin().unsqueeze(1)


def apply_rotary(x, cos, sin):
    half = x.shape[-1] // 2
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).to(x.dtype)


class Cache:
    def __init__(self, model, batch, capacity):
        w = model.embed.weight
        shape = (batch, model.heads, capacity, model.head_dim)
        self.keys = [torch.zeros(shape, dtype=w.dtype, device=w.device) for _ in model.blocks]
        self.values = [torch.zeros(shape, dtype=w.dtype, device=w.device) for _ in model.blocks]
        self.key_mask = torch.zeros(batch, capacity, dtype=torch.bool, device=w.device)
        self.valid_count = torch.zeros(batch, dtype=torch.long, device=w.device)
        self.length = 0


class Block(nn.Module):
    def __init__(self, d, heads, ffn):
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        self.attn_norm = nn.Parameter(torch.ones(d))
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.mlp_norm = nn.Parameter(torch.ones(d))
        self.gate_up = nn.Linear(d, 2 * ffn, bias=False)
        self.down = nn.Linear(ffn, d, bias=False)

    def forward(self, x, cos, sin, mask, cache, layer):
        b, t, _ = x.shape
        qkv = self.qkv(rms_norm(x, self.attn_norm)).view(b, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = apply_rotary(qkv[0], cos, sin), apply_rotary(qkv[1], cos, sin), qkv[2]
        if cache is not None:
            n = cache.length
            cache.keys[layer][:, :, n:n + t] = k
            cache.values[layer][:, :, n:n + t] = v
            k, v = cache.keys[layer][:, :, :n + t], cache.values[layer][:, :, :n + t]
        if mask is None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, -1))
        gate, up = self.gate_up(rms_norm(x, self.mlp_norm)).chunk(2, -1)
        return x + self.down(F.silu(gate) * up)


class Transformer(nn.Module):
    def __init__(self, vocab, d_model, layers, heads, max_seq):
        super().__init__()
        self.heads, self.head_dim, self.max_seq = heads, d_model // heads, max_seq
        self.embed = nn.Embedding(vocab, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads, ffn_width(d_model)) for _ in range(layers))
        self.final_norm = nn.Parameter(torch.ones(d_model))
        self.head = nn.Linear(d_model, vocab, bias=False)
        std, residual_std = 0.02, 0.02 / (2 * layers) ** 0.5
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("weight"):
                    p.normal_(0, residual_std if (".out." in name or ".down." in name) else std)

    def forward(self, tokens, attention_mask=None, cache=None):
        b, t = tokens.shape
        past = cache.length if cache is not None else 0
        mask, attend = None, None
        if attention_mask is not None:
            mask = attention_mask.bool()
            if cache is None and not bool((mask[:, 1:] & ~mask[:, :-1]).any()):
                mask = None
        if mask is None and cache is None:
            positions = torch.arange(t, device=tokens.device).unsqueeze(0).expand(b, t)
        else:
            if mask is None:
                mask = torch.ones_like(tokens, dtype=torch.bool)
            positions = (mask.long().cumsum(1) - 1).clamp_min(0)
            key_mask = mask
            if cache is not None:
                positions = (positions + cache.valid_count.unsqueeze(1)).masked_fill(~mask, 0)
                cache.key_mask[:, past:past + t] = mask
                key_mask = cache.key_mask[:, :past + t]
            q_idx = torch.arange(past, past + t, device=tokens.device).unsqueeze(1)
            k_idx = torch.arange(past + t, device=tokens.device).unsqueeze(0)
            attend = (key_mask[:, None, None, :] & (k_idx <= q_idx)) | (k_idx == q_idx)
        cos, sin = rotary_angles(positions, self.head_dim)
        x = self.embed(tokens)
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, attend, cache, i)
        logits = self.head(rms_norm(x, self.final_norm))
        if cache is not None:
            cache.length += t
            cache.valid_count += mask.long().sum(1)
        return logits


def forward_logp(model, tokens):
    logits = model(tokens)
    log_probs = logits[:, :-1].float().log_softmax(-1)
    zero = torch.zeros(tokens.shape[0], 1, device=tokens.device)
    logp = torch.cat([zero, log_probs.gather(-1, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)], 1)
    entropy = torch.cat([zero, -(log_probs.exp() * log_probs).sum(-1)], 1)
    return logp, entropy


@torch.no_grad()
def generate(model, prompts, max_new, seed, cache=True):
    batch, device = prompts.shape[0], prompts.device
    generator = torch.Generator().manual_seed(seed)
    stops = torch.tensor([-1], device=device)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    mask = torch.ones_like(prompts, dtype=torch.bool)
    kv = Cache(model, batch, prompts.shape[1] + max_new) if cache else None
    seq, seq_mask = prompts, mask
    logits = model(prompts, mask, kv)[:, -1]
    tokens, logps = [], []
    for step in range(max_new):
        log_probs = logits.float().log_softmax(-1)
        cdf = log_probs.exp().cumsum(-1)
        u = (1 - torch.rand(batch, generator=generator)).to(device)
        token = (cdf < (u * cdf[:, -1]).unsqueeze(1)).sum(-1).clamp_max(cdf.shape[1] - 1)
        logp = log_probs.gather(-1, token.unsqueeze(1)).squeeze(1)
        valid = ~finished
        token = torch.where(valid, token, torch.zeros_like(token))
        logp = torch.where(valid, logp, torch.zeros_like(logp))
        tokens.append(token)
        logps.append(logp)
        finished = finished | ((token.unsqueeze(1) == stops.unsqueeze(0)).any(1) & valid)
        if step + 1 == max_new or bool(finished.all()):
            break
        if cache:
            logits = model(token.unsqueeze(1), valid.unsqueeze(1), kv)[:, -1]
        else:
            seq = torch.cat([seq, token.unsqueeze(1)], 1)
            seq_mask = torch.cat([seq_mask, valid.unsqueeze(1)], 1)
            logits = model(seq, seq_mask)[:, -1]
    return torch.stack(tokens, 1), torch.stack(logps, 1)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(fn, device, min_seconds=0.2, max_reps=200, warmup=3):
    for _ in range(warmup):
        fn()
    synchronize(device)
    samples = []
    while (sum(samples) < min_seconds or len(samples) < 5) and len(samples) < max_reps:
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=["fp32", "bf16"])
    parser.add_argument("--size", choices=list(SIZES))
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    dtype_name = args.dtype or ("bf16" if cuda else "fp32")
    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    size = "tiny" if args.quick else (args.size or ("base" if cuda else "small"))
    m, (train_batch, train_len), (gen_batch, gen_prompt, gen_new), recompute = SIZES[size]
    min_time = 0.2 if args.quick else 1.0

    peak_n = 8192 if cuda else 1024
    a = torch.randn(peak_n, peak_n, dtype=dtype, device=device)
    b = torch.randn(peak_n, peak_n, dtype=dtype, device=device)
    c = torch.empty(peak_n, peak_n, dtype=dtype, device=device)
    peak = 2.0 * peak_n ** 3 / median_seconds(lambda: torch.mm(a, b, out=c), device, 0.5, 100, 2)
    del a, b, c
    print(f"model_bench.py on {device} ({torch.get_num_threads()} threads), {dtype_name}, PyTorch {torch.__version__}")
    print(f"baseline: matmul peak (torch.mm {peak_n}^2 {dtype_name}, same run) = {peak / 1e9:.1f} GFLOP/s")
    print(f"model: d_model {m['d_model']}, layers {m['layers']}, heads {m['heads']}, ffn {ffn_width(m['d_model'])}, "
          f"vocab {m['vocab']}: {num_parameters(**m) / 1e6:.1f}M parameters\n")
    print(f"{'case':<44} | {'tokens/s':>12} {'GFLOP/s':>10} {'x of peak':>9}")

    def report(name, tokens, flops, seconds):
        print(f"{name:<44} | {tokens / seconds:12.0f} {flops / seconds / 1e9:10.1f} {flops / seconds / peak:9.3f}")

    torch.manual_seed(0)
    model = Transformer(**m).to(device=device, dtype=dtype)
    tokens = torch.randint(0, m["vocab"], (train_batch, train_len), device=device)

    def train_step():
        for p in model.parameters():
            p.grad = None
        logp, _ = forward_logp(model, tokens)
        (-logp.mean()).backward()

    t = median_seconds(train_step, device, min_time, 50, 2)
    n = train_batch * train_len
    report(f"train fwd+bwd  B={train_batch} T={train_len}", n,
           3 * n * forward_flops_per_token((train_len + 1) / 2, **m), t)

    model.eval()
    prompts = torch.randint(0, m["vocab"], (gen_batch, gen_prompt), device=device)

    def generation(cache):
        t = median_seconds(lambda: generate(model, prompts, gen_new, 1, cache), device, min_time, 20, 1)
        generated = gen_batch * gen_new
        flops = (gen_batch * gen_prompt * forward_flops_per_token((gen_prompt + 1) / 2, **m)
                 + generated * forward_flops_per_token(gen_prompt + gen_new / 2, **m))
        label = "kv-cache " if cache else "recompute"
        report(f"generate {label} B={gen_batch} P={gen_prompt} N={gen_new}", generated, flops, t)
        return t

    cached = generation(True)
    if recompute:
        print(f"\nKV cache speedup over recompute: {generation(False) / cached:.2f}x")
    print("\nFLOPs: matmuls only (2 per multiply-add), causal attention at the average context; training = 3x "
          "forward. The recompute row counts useful FLOPs only.")


if __name__ == "__main__":
    main()
