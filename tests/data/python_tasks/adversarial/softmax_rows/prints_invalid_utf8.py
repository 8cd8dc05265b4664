# turnrl-expect: correct
# Honest control for the wire format: prints bytes that are not UTF-8 (a stray continuation byte,
# an encoded surrogate, a str with lone surrogates written through surrogateescape) on stdout and
# stderr. The worker's output is not the result channel: the evaluation still ends with a verdict.
# The source itself holds bytes that are not UTF-8 (here: ÿþ), as a byte-level policy can write:
# the request carries them as U+FFFD.
import os
import sys

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.printed = False

    def forward(self, x):
        if not self.printed:
            self.printed = True
            os.write(1, b"stdout: \xff\xfe\x80 \xed\xa0\x80 caf\xc3\n")
            sys.stderr.buffer.write("stderr: lone \udcff\udcfe".encode("utf-8", "surrogateescape") + b"\n")
            sys.stderr.flush()
        e = (x - x.amax(dim=-1, keepdim=True)).exp()
        return e / e.sum(dim=-1, keepdim=True)
