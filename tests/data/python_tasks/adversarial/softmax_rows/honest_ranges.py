# turnrl-expect: correct
# Honest control: opens profiler ranges of its own around its steps (as instrumented code does); the
# harness's range exclusion must not hide or flag them.
import torch
import torch.nn as nn
from torch.autograd.profiler import record_function


class ModelNew(nn.Module):
    def forward(self, x):
        with record_function("softmax_max"):
            m = x.amax(dim=-1, keepdim=True)
        with record_function("softmax_exp"):
            e = (x - m).exp()
        return e / e.sum(dim=-1, keepdim=True)
