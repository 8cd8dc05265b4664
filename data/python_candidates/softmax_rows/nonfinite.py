# turnrl-expect: error:nonfinite
# exp without the max shift overflows for these inputs (x scaled by 100): inf / inf = nan.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        e = (x * 100.0).exp() ** 4
        return e / e.sum(dim=-1, keepdim=True)
