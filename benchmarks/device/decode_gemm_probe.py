#!/usr/bin/env python3
"""The decode step's GEMMs at small M (the batch), on the GPU: how close cuBLAS (through
torch.nn.functional.linear, as the engine calls it) comes to the weight-read bound, and how
close a plain Triton skinny GEMM comes, each projection of a Qwen3 shape at M = 64 and 256.

Every timing replays one CUDA graph of the projection over 28 distinct weight copies (as a
decode step reads 28 layers), so the weights come from HBM and not from L2; the figure is the
time a call in the graph, and its weight bytes over that time.

    python3 benchmarks/device/decode_gemm_probe.py [--quick] [--tunable]

"read us" is one kernel that only reads the same weight bytes (the floor for a kernel launched
after the previous one ends); "tuned us" is cuBLAS after TunableOp picked its algorithm.
"""
import argparse

import torch
import triton
import triton.language as tl

SHAPES = {
    # name: hidden, intermediate, q heads, kv heads, head_dim
    "qwen3-0.6b": (1024, 3072, 16, 8, 128),
    "qwen3-1.7b": (2048, 6144, 16, 8, 128),
}


@triton.jit
def skinny_gemm(x, w, y, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                SPLIT_K: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rm = tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_per = K // SPLIT_K
    for k0 in range(pid_k * k_per, (pid_k + 1) * k_per, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(x + rm[:, None] * K + rk[None, :], mask=rm[:, None] < M, other=0.0)
        b = tl.load(w + rn[None, :] * K + rk[:, None])
        acc += tl.dot(a, b)
    if SPLIT_K == 1:
        tl.store(y + rm[:, None] * N + rn[None, :], acc.to(y.dtype.element_ty), mask=rm[:, None] < M)
    else:
        tl.atomic_add(y + rm[:, None] * N + rn[None, :], acc, mask=rm[:, None] < M)


@triton.jit
def read_rows(w, out, numel, BLOCK: tl.constexpr):
    # Streams its share of w and keeps a sum, so that the loads are not dropped: the time one
    # kernel needs only to read the bytes a projection's weights hold.
    start = tl.program_id(0) * BLOCK
    step = tl.num_programs(0) * BLOCK
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for offset in range(start, numel, step):
        idx = offset + tl.arange(0, BLOCK)
        acc += tl.load(w + idx, mask=idx < numel, other=0.0).to(tl.float32)
    tl.store(out + tl.program_id(0), tl.sum(acc, 0))


def graph_time_us(fn, calls):
    """Microseconds a call: one CUDA graph of `calls` calls, replayed."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(5):
        start.record()
        for _ in range(10):
            graph.replay()
        stop.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(stop) * 1000 / 10 / calls)
    return best


def copy_bandwidth():
    a = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    us = graph_time_us(lambda: b.copy_(a), 1)
    return 2 * a.numel() / us / 1e3


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tunable", action="store_true",
                        help="also time cuBLAS through PyTorch's TunableOp (each shape's GEMM algorithms timed, best kept)")
    args = parser.parse_args()
    torch.manual_seed(0)
    layers = 28
    bandwidth = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          f"copy bandwidth {bandwidth:.0f} GB/s")
    configs = [(bn, bk, sk, st, wp) for bn in (16, 32, 64) for bk in (64, 128, 256) for sk in (1, 2)
               for st in (3, 5) for wp in (4,)]
    if args.quick:
        configs = [(32, 128, 1, 4, 4), (64, 128, 1, 4, 4), (16, 256, 1, 4, 4), (32, 128, 2, 4, 4)]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{'shape':12} {'proj':8} {'M':>4} {'N':>6} {'K':>6} | {'read us':>7} | {'cuBLAS us':>9} {'GB/s':>6} | "
          f"{'tuned us':>8} | {'Triton us':>9} {'GB/s':>6} {'config (BN, BK, splitK, stages, warps)':>40}")
    for shape, (hidden, inter, heads, kv_heads, dim) in SHAPES.items():
        projections = {
            "qkv": (hidden, (heads + 2 * kv_heads) * dim),
            "o": (heads * dim, hidden),
            "gate_up": (hidden, 2 * inter),
            "down": (inter, hidden),
        }
        for m in (64, 256):
            total_cublas = total_triton = total_read = total_tuned = 0.0
            for name, (k, n) in projections.items():
                weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(layers)]
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                outs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(layers)]

                def cublas():
                    for w, o in zip(weights, outs):
                        torch.matmul(x, w.t(), out=o)

                cublas_us = graph_time_us(cublas, layers)
                sums = torch.empty(4 * sms, device="cuda", dtype=torch.float32)
                read_us = graph_time_us(lambda: [read_rows[(4 * sms,)](w, sums, w.numel(), BLOCK=2048) for w in weights],
                                        layers)
                tuned_us = float("nan")
                if args.tunable:
                    torch.cuda.tunable.enable(True)
                    torch.cuda.tunable.tuning_enable(True)
                    try:
                        tuned_us = graph_time_us(cublas, layers)  # its eager warm-up calls tune the shape
                    finally:
                        torch.cuda.tunable.enable(False)
                reference = torch.nn.functional.linear(x, weights[0])
                best = (float("inf"), None)
                for bn, bk, sk, st, wp in configs:
                    if n % bn or k % (bk * sk):
                        continue
                    fouts = [torch.zeros(m, n, device="cuda", dtype=torch.float32 if sk > 1 else torch.bfloat16)
                             for _ in range(layers)]

                    def triton_call():
                        for w, o in zip(weights, fouts):
                            if sk > 1:
                                o.zero_()
                            skinny_gemm[(n // bn, sk)](x, w, o, m, n, k, BLOCK_M=max(16, m), BLOCK_N=bn, BLOCK_K=bk,
                                                       SPLIT_K=sk, num_stages=st, num_warps=wp)

                    try:
                        us = graph_time_us(triton_call, layers)
                    except Exception as e:  # a config that does not fit shared memory
                        continue
                    err = (fouts[0].float() - reference.float()).abs().max().item()
                    if err > 0.05:
                        print(f"   config {(bn, bk, sk, st, wp)} wrong: max error {err}")
                        continue
                    if us < best[0]:
                        best = (us, (bn, bk, sk, st, wp))
                bytes_ = n * k * 2
                total_cublas += cublas_us
                total_read += read_us
                total_tuned += tuned_us
                total_triton += best[0]
                print(f"{shape:12} {name:8} {m:4} {n:6} {k:6} | {read_us:7.2f} | {cublas_us:9.2f} "
                      f"{bytes_ / cublas_us / 1e3:6.0f} | {tuned_us:8.2f} | {best[0]:9.2f} {bytes_ / best[0] / 1e3:6.0f} {str(best[1]):>40}")
                del weights, outs
            print(f"{shape:12} {'layer':8} {m:4} {'':6} {'':6} | {total_read:7.2f} | {total_cublas:9.2f} {'':6} | "
                  f"{total_tuned:8.2f} | {total_triton:9.2f}", flush=True)


if __name__ == "__main__":
    main()
