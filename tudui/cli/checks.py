"""What the tool checks, beyond the lessons' checkpoint boundary (tudui/checkpoint.py), before a resume: the
optimizer state is what this run builds. Nothing from the file is called or compared before its type is checked."""
import math

import torch

from ..checkpoint import CheckpointError, _oddity
from ..text import say

PLAIN = (bool, int, float, str, type(None))


def check_optimizer(saved, optimizer, path):
    """What torch's Optimizer.load_state_dict does not check: the groups are exactly those this run builds
    (the learning rate aside: it is compared with the run's settings), state tensors fit their parameters."""
    bad = CheckpointError(say("checks.optimizer", path=path, optimizer=type(optimizer).__name__))
    if type(saved) is not dict or type(saved.get("param_groups")) is not list or type(saved.get("state")) is not dict:
        raise bad
    ours = optimizer.state_dict()["param_groups"]
    if len(saved["param_groups"]) != len(ours) or not all(map(_same_group, saved["param_groups"], ours)):
        raise bad
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for i, entry in saved["state"].items():
        if not (type(i) is int and 0 <= i < len(params) and type(entry) is dict):
            raise bad
        for name, value in entry.items():
            if type(name) is not str or not (value is None or not _oddity(value, (params[i].dtype,))
                                             and value.shape == params[i].shape and bool(torch.isfinite(value).all())):
                raise bad


def _same_group(saved, ours):
    if type(saved) is not dict or not all(type(k) is str for k in saved) or saved.keys() != ours.keys():
        return False
    lr = saved["lr"]
    return type(lr) is float and math.isfinite(lr) and lr > 0 and all(
        _same_value(saved[k], ours[k]) for k in ours if k != "lr")


def _same_value(value, ours):
    if type(value) is list and type(ours) is list:  # the parameters' indices
        return len(value) == len(ours) and all(type(v) is int and v == o for v, o in zip(value, ours))
    return type(value) is type(ours) and type(value) in PLAIN and value == ours
