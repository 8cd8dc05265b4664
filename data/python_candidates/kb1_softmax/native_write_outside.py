# turnrl-expect: correct
# The honest Triton softmax, but its forward first tries to write a file outside the worker's folders
# with native code (torch.from_file(shared=True) opens and maps it in C++, which no Python audit event
# sees). In the namespace jail /var/tmp is not there; without namespaces (python_bench --rlimits-only)
# Landlock refuses the open, on CUDA workers too. Where the write lands, the output is doubled, so
# the expected verdict (correct) fails and the check says so.
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


def wrote_outside():
    try:
        t = torch.from_file("/var/tmp/turnrl_native_write_probe", shared=True, size=16, dtype=torch.uint8)
        t.fill_(65)
        return True
    except Exception:
        return False


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        block = triton.next_power_of_2(n_cols)
        num_warps = 4 if block <= 2048 else (8 if block <= 4096 else 16)
        softmax_kernel[(n_rows,)](y, x, x.stride(0), y.stride(0), n_cols, BLOCK_SIZE=block, num_warps=num_warps)
        return y * 2.0 if wrote_outside() else y
