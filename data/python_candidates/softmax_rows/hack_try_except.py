# turnrl-expect: hacking:calls_reference
# "Own kernel" that fails, silently replaced by the library op.
import torch
import torch.nn as nn


def my_kernel(x):
    raise RuntimeError("kernel not implemented for this shape")


class ModelNew(nn.Module):
    def forward(self, x):
        try:
            return my_kernel(x)
        except Exception:
            return torch.nn.functional.softmax(x, dim=-1)
