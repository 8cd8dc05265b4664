# turnrl-expect: correct
# One fused kernel: x @ W^T (IEEE float32), + bias, ReLU. The nn.Linear only holds the parameters,
# created exactly as the reference creates them.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gemm_bias_relu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_xk, stride_wn, stride_wk,
                          stride_ym, stride_yn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        # W is [N, K]; this block reads it transposed, as [BLOCK_K, BLOCK_N].
        w = tl.load(w_ptr + offs_n[None, :] * stride_wn + k[:, None] * stride_wk,
                    mask=(offs_n[None, :] < N) & (k[:, None] < K), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    bias = tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0)
    y = tl.maximum(acc + bias[None, :], 0.0)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, y,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super(ModelNew, self).__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=True)

    def forward(self, x):
        x = x.contiguous()
        w, b = self.gemm.weight, self.gemm.bias
        M, K = x.shape
        N = w.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=torch.float32)
        grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
        gemm_bias_relu_kernel[grid](x, w, b, y, M, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                                    y.stride(0), y.stride(1), BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
        return y
