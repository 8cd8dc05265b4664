# turnrl-expect: error:runtime
# Returns a tensor on the meta device (right shape and dtype, no data): the candidate's error, which
# shipping it used to turn into the evaluator's ("internal", not the candidate's fault).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.empty(x.shape, dtype=x.dtype, device="meta")
