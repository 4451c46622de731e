"""What stands in for an adopted model's outputs once a lost process is known (_stop.py): zeros
of the last forward's shapes and dtypes, requiring grad where those did, the structure kept; an
output that hides tensors from torch's pytree is never stood in for (its tensors would be the
last step's, whose graph is gone)."""
from collections import OrderedDict

import torch

from dynatrain import _interrupt, _stop


class ModelOutput(OrderedDict):
    """A dict subclass, as some libraries return: a leaf to torch 1.13's pytree."""


def test_stand_ins_keep_the_structure_shapes_dtypes_and_grad(monkeypatch):
    monkeypatch.setattr(_interrupt, "interrupted", lambda: True)  # the loss already kept
    logits = torch.randn(2, 3, 5, requires_grad=True) * 2
    out = (logits, {"aux": torch.ones(4, dtype=torch.float64), "tokens": torch.arange(3), "n": 7}, None)
    shapes = _stop._shapes(out)
    stood = _stop._stand_in(shapes)
    assert stood[0].shape == (2, 3, 5) and stood[0].dtype == torch.float32 and stood[0].requires_grad
    assert float(stood[0].abs().sum()) == 0.0
    assert stood[1]["aux"].dtype == torch.float64 and not stood[1]["aux"].requires_grad
    assert stood[1]["tokens"].dtype == torch.int64 and stood[1]["n"] == 7 and stood[2] is None
    torch.nn.functional.cross_entropy(stood[0].view(-1, 5), torch.zeros(6, dtype=torch.long)).backward()  # cheap, no error
    assert _stop.take_stopped() and not _stop.take_stopped()  # counted once for the recovery


def test_outputs_hiding_tensors_are_never_stood_in_for():
    t = torch.ones(2, requires_grad=True)
    assert _stop._shapes(ModelOutput(logits=t)) is None
    assert _stop._shapes([t, object()]) is None
    assert _stop._shapes(t) is not None
