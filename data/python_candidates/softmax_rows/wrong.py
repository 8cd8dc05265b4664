# turnrl-expect: error:mismatch
# Forgets to normalise: exp(x - max) is not a softmax.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return (x - x.amax(dim=-1, keepdim=True)).exp()
