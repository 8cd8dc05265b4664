# turnrl-expect: rejected
# An out-of-bounds store: an illegal address poisons the CUDA context; the worker is replaced.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, num / den, mask=mask)


@triton.jit
def touch_kernel(ptr):
    tl.store(ptr, tl.load(ptr))


@triton.jit
def wild_store_kernel(ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(ptr + offs + (1 << 40), offs.to(tl.float32))


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        wild_store_kernel[(1,)](y, BLOCK=128)
        torch.cuda.synchronize()
        return y
