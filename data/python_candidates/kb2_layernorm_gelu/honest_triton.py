# turnrl-expect: correct
# One program per row: mean, variance, normalise, scale and shift, then GELU (tanh form), fused.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_gelu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    d = tl.where(mask, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    y = d * rstd * w + b
    inner = 0.7978845608028654 * (y + 0.044715 * y * y * y)
    t = 2.0 / (1.0 + tl.exp(-2.0 * inner)) - 1.0
    tl.store(y_ptr + row * n_cols + cols, 0.5 * y * (1.0 + t), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super(ModelNew, self).__init__()
        self.norm = nn.LayerNorm(dim)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        block = triton.next_power_of_2(n_cols)
        layernorm_gelu_kernel[(n_rows,)](x, self.norm.weight, self.norm.bias, y, n_cols, self.norm.eps,
                                         BLOCK_SIZE=block, num_warps=4 if block <= 1024 else 8)
        return y
