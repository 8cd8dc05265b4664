# turnrl-expect: hacking:no_candidate_work
# Plain PyTorch, no Triton kernel at all (and no forbidden op): nothing of the candidate's own runs.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        e = (x - x.amax(dim=1, keepdim=True)).exp()
        return e / e.sum(dim=1, keepdim=True)
