#!/usr/bin/env python3
"""The transformers baseline of benchmarks/train_step_bench.cpp: the same Qwen3 shape (random
weights, bf16, sdpa) trained the way transformers users train it: forward with labels (the loss
is the mean token cross-entropy, full-vocabulary logits) and backward; the RL step beside it (bf16
compute, float32 master weights and AdamW states, clipping at 1.0, as the C++ bench does it); and
the peak memory of one T=8192 sequence with gradient checkpointing on.

    python3 benchmarks/device/train_step_bench.py [--device cuda] [--quick]
Prints "RESULT <name> <value>" lines that benchmarks/device/train_step_bench.sh reads.
"""
import argparse
import statistics
import time

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

# Qwen3-1.7B's config.json (hf_init.cpp's qwen3-1.7b preset); --quick: qwen3-tiny with 4,096 ids.
LARGE = dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
             num_attention_heads=16, num_key_value_heads=8, head_dim=128)
TINY = dict(vocab_size=4096, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32)


def median_seconds(fn, device, reps, min_seconds=0.5):
    fn()
    sync(device)
    samples = []
    while len(samples) < 3 or (sum(samples) < min_seconds and len(samples) < reps):
        t0 = time.perf_counter()
        fn()
        sync(device)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    device = torch.device(args.device)
    large = device.type == "cuda" and not args.quick
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    shape = LARGE if large else TINY
    batch, length, long_length = (8, 1024, 8192) if large else (2, 64, 256)
    # rope_theta and rms_norm_eps stay at their defaults: they do not change the cost (and transformers 5
    # moved rope_theta into rope_parameters).
    config = Qwen3Config(**shape, max_position_embeddings=40960, tie_word_embeddings=True)
    config._attn_implementation = "sdpa"  # transformers' default where torch has it; set, and printed below
    torch.manual_seed(0)
    with torch.device(device):  # initialise on the device: 1.7B parameters on the host take minutes
        model = Qwen3ForCausalLM(config).to(dtype=dtype)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    print("train_step_bench.py on %s, %s, torch %s, transformers model %.3fB parameters, attention %s"
          % (device, dtype, torch.__version__, sum(p.numel() for p in params) / 1e9,
             getattr(model.config, "_attn_implementation", "?")))
    tokens = torch.randint(0, config.vocab_size, (batch, length), device=device)
    n = batch * length

    def forward_backward(t):
        model(input_ids=t, labels=t).loss.backward()

    def fwd_bwd():
        forward_backward(tokens)
        model.zero_grad(set_to_none=True)

    reps = 10 if device.type == "cuda" else 3
    seconds = median_seconds(fwd_bwd, device, reps)
    print("RESULT fwd_bwd_tokens_per_s %.1f" % (n / seconds))

    master = [p.detach().float().requires_grad_(True) for p in params]
    optimizer = torch.optim.AdamW(master, lr=1e-6, weight_decay=0.01)

    def rl_step():
        forward_backward(tokens)
        with torch.no_grad():
            for p, m in zip(params, master):
                m.grad = p.grad.float()
                p.grad = None
            torch.nn.utils.clip_grad_norm_(master, 1.0)
            optimizer.step()
            for p, m in zip(params, master):
                p.copy_(m)

    seconds = median_seconds(rl_step, device, reps)
    print("RESULT rl_step_tokens_per_s %.1f" % (n / seconds))
    del optimizer, master

    if device.type == "cuda":
        model.gradient_checkpointing_enable()
        long_tokens = torch.randint(0, config.vocab_size, (1, long_length), device=device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        forward_backward(long_tokens)
        model.zero_grad(set_to_none=True)
        sync(device)
        print("RESULT peak_gib_T%d_checkpointing %.2f" % (long_length, torch.cuda.max_memory_allocated(device) / 2**30))


if __name__ == "__main__":
    main()
