# turnrl-expect: error:runtime
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        e = (x - x.amax(dim=-1, keepdim=True)).exp()
        return e / e.sum(dim=-1, keepdim=True) @ torch.ones(3, 3)  # shapes do not match
