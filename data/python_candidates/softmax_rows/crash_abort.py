# turnrl-expect: error:crash
import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        os.abort()
