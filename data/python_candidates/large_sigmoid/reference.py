# turnrl-expect: correct
# The reference itself as the candidate: a large problem's right verdict is "correct".
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x)
