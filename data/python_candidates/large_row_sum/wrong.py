# turnrl-expect: error:mismatch
# Sums only the first half of every row.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x[:, : x.shape[1] // 2], dim=1)
