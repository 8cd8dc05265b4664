# turnrl-expect: correct
# LayerNorm from mean and variance; the parameters are created exactly as the reference creates them.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        centred = x - mean
        var = (centred * centred).mean(dim=-1, keepdim=True)
        return centred * torch.rsqrt(var + self.norm.eps) * self.norm.weight + self.norm.bias
