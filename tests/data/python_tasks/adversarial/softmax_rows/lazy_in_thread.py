# turnrl-expect: rejected
# Calls the forbidden softmax on a helper thread that it joins before returning: the operator has no
# parent range on the calling thread.
# On CPU the worker refuses new threads (seccomp), so starting one fails.
import threading

import torch
import torch.nn as nn

# Looked up by a computed name: the source scan does not see it, only the profile does.
_library = getattr(torch, "soft" + "max")


class ModelNew(nn.Module):
    def forward(self, x):
        box = []
        t = threading.Thread(target=lambda: box.append(_library(x, dim=-1)))
        t.start()
        t.join()
        return box[0]
