# turnrl-expect: error:crash
# A real SIGSEGV (faulthandler's test helper dereferences a null pointer).
import faulthandler

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        faulthandler._sigsegv()
