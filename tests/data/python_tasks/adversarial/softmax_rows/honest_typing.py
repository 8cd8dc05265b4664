# turnrl-expect: correct
# Honest control: builds typing aliases while it runs (as lazily imported modules and torch.compile
# do). With typing_extensions loaded, every Union[...] asks sys._getframe whether Generic is being
# subscripted; that library call must not be taken for a frame walk.
import typing
import torch
import torch.nn as nn

T = typing.TypeVar("T")


class ModelNew(nn.Module):
    def forward(self, x):
        shapes = typing.Union[typing.List[T], typing.Tuple[int, ...], None]
        assert shapes is not None
        m = x.amax(dim=-1, keepdim=True)
        e = (x - m).exp()
        return e / e.sum(dim=-1, keepdim=True)
