# turnrl-expect: correct
# Honest control: softmax computed in row blocks with a Python loop (many small operators per call,
# more harness-side bookkeeping than the reference's single operator).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        for start in range(0, x.shape[0], 16):
            rows = x[start:start + 16]
            e = (rows - rows.amax(dim=-1, keepdim=True)).exp()
            out[start:start + 16] = e / e.sum(dim=-1, keepdim=True)
        return out
