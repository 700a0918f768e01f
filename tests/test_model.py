"""The network is the course's Tudui, layer for layer, so learners' files load into it."""
import math

import pytest
import torch
from torch import nn

from tudui import Tudui, count_parameters
from helpers import course_tudui_class

# The course's layers: (state_dict key prefix, layer type, weight shape, bias shape).
COURSE_LAYERS = [
    ("model.0", nn.Conv2d, (32, 3, 5, 5), (32,)),
    ("model.2", nn.Conv2d, (32, 32, 5, 5), (32,)),
    ("model.4", nn.Conv2d, (64, 32, 5, 5), (64,)),
    ("model.7", nn.Linear, (64, 64 * 4 * 4), (64,)),
    ("model.8", nn.Linear, (10, 64), (10,)),
]


def test_parameter_count_is_the_courses():
    """Per layer, weights plus biases of the course's shapes; 145,578 in all, the number the course prints."""
    per_layer = [math.prod(weight) + math.prod(bias) for _, _, weight, bias in COURSE_LAYERS]
    model = Tudui()
    assert [sum(p.numel() for p in layer.parameters()) for layer in model.model if list(layer.parameters())] \
        == per_layer
    assert count_parameters(model) == 145_578


def test_count_parameters_skips_frozen_ones():
    model = Tudui()
    model.model[8].requires_grad_(False)
    assert count_parameters(model) == 145_578 - (10 * 64 + 10)


def test_state_dict_keys_and_shapes_match_the_course():
    state = Tudui().state_dict()
    expected = {}
    for prefix, _, weight, bias in COURSE_LAYERS:
        expected[f"{prefix}.weight"] = weight
        expected[f"{prefix}.bias"] = bias
    assert list(state) == list(expected)  # same keys, same order
    assert {k: tuple(v.shape) for k, v in state.items()} == expected


def test_layers_are_the_courses_in_order_and_there_is_no_relu():
    model = Tudui()
    types = [type(m) for m in model.model]
    assert types == [nn.Conv2d, nn.MaxPool2d, nn.Conv2d, nn.MaxPool2d, nn.Conv2d, nn.MaxPool2d,
                     nn.Flatten, nn.Linear, nn.Linear]
    assert not any(isinstance(m, nn.ReLU) for m in model.modules())
    for conv in (model.model[0], model.model[2], model.model[4]):
        assert (conv.kernel_size, conv.stride, conv.padding) == ((5, 5), (1, 1), (2, 2))
    for pool in (model.model[1], model.model[3], model.model[5]):
        assert pool.kernel_size == 2


@pytest.mark.parametrize("n", [1, 3])
def test_output_is_ten_scores_per_image(n):
    model = Tudui().eval()
    with torch.no_grad():
        out = model(torch.rand(n, 3, 32, 32))
    assert out.shape == (n, 10)
    assert out.dtype == torch.float32


def test_course_weights_give_the_course_outputs():
    """A state_dict of the course's own class loads strictly and computes the same function."""
    torch.manual_seed(0)
    course = course_tudui_class()().eval()
    ours = Tudui().eval()
    ours.load_state_dict(course.state_dict(), strict=True)
    x = torch.rand(4, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(ours(x), course(x))

