# turnrl-expect: error:mismatch
# Right everywhere but at flat element 12345 (off by 0.25): the comparison on the device must find
# that one element (tests/kernels/test_python_backend.cpp checks failing_index and the error).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.sigmoid(x)
        y.view(-1)[12345] += 0.25
        return y
