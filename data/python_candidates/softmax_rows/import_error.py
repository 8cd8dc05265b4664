# turnrl-expect: error:compile
# Fails while the module is executed (KernelGYM calls this a compilation error too).
import torch
import torch.nn as nn
import a_module_that_does_not_exist


class ModelNew(nn.Module):
    def forward(self, x):
        return x
