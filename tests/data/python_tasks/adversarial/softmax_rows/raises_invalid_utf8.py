# turnrl-expect: error:runtime
# An exception whose message holds lone surrogates (from bytes decoded with surrogateescape, and one
# written directly) next to valid non-ASCII text: the message enters the worker's JSON reply, which
# must stay valid UTF-8 and carry the valid characters unchanged.
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        garbled = b"\xff\xfe\x80".decode("utf-8", "surrogateescape")
        raise RuntimeError("bad bytes " + garbled + " \ud800 and valid text caf\u00e9 \u20ac \U0001f600")
