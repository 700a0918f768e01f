"""A pretend GPU: "cuda:0" tensors on a machine without one, which refuse to meet CPU tensors as CUDA does.
Inside ``pretend_gpu()`` (rehearse and the tests use it) whatever is moved to or made on "cuda" is an :class:`OnCuda`
tensor, on torch's ``meta`` device underneath: autograd and the optimizers never ask a driver for anything. torch.cuda
answers as one GPU; what would start the real CUDA runtime raises. Not covered: CUDA events, streams, several GPUs."""
import contextlib
import dataclasses
import os
import sys
import types
from unittest import mock

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves, tree_map

from ..text import say

CUDA = torch.device("cuda", 0)
COPIES = {torch.ops.aten.copy_.default}  # dst.copy_(src) copies across devices, as load_state_dict does
POINTWISE = torch.Tag.pointwise
_GPUS = []  # the GPU record of the pretend_gpu() in force
MIXED = "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"


class OnCuda(torch.Tensor):
    """A tensor that is on cuda:0 as far as Python code can tell; ``.elem`` holds its values on the CPU."""

    __torch_function__ = torch._C._disabled_torch_function_impl  # the mode below does the redirecting

    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.size(), strides=elem.stride(), dtype=elem.dtype,
                                                   device="meta", requires_grad=elem.requires_grad)

    def __init__(self, elem):
        self.elem = elem

    device = property(lambda self: CUDA)
    is_cuda = property(lambda self: True)
    is_meta = property(lambda self: False)  # else load_state_dict skips copying into it

    def __repr__(self):  # printing a GPU tensor reads it: the CPU waits for the GPU
        if _GPUS:
            _GPUS[-1].syncs += 1
        return repr(self.elem)[:-1] + ", device='cuda:0')"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if func not in COPIES and any(not isinstance(t, OnCuda) and not _scalar_input(func, t, args) for t in tensors):
            raise RuntimeError(say("rehearse.pretend.mixed", mixed=MIXED, func=func))  # the bracket: not CUDA's
        wrappers = {id(t.elem): t for t in tensors if isinstance(t, OnCuda)}
        cpu_args, cpu_kwargs = tree_map(lambda t: t.elem if isinstance(t, OnCuda) else t, (args, kwargs))
        if cpu_kwargs.get("device") is not None and torch.device(cpu_kwargs["device"]).type == "meta":
            cpu_kwargs["device"] = torch.device("cpu")  # e.g. empty_like(x): made where x's values are
        out = func(*cpu_args, **cpu_kwargs)
        def wrap(t):  # an in-place op returns its input: give back the same OnCuda object
            return wrappers[id(t)] if id(t) in wrappers else OnCuda(t) if isinstance(t, torch.Tensor) else t
        return tree_map(wrap, out)


def callers() -> list:
    """(file, line) of every frame of the Python stack, outermost first."""
    frame, pairs = sys._getframe(1), []
    while frame:
        pairs.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return pairs[::-1]


def _scalar_input(func, tensor, args) -> bool:
    """A CPU 0-dim tensor CUDA takes: an input of an elementwise operation (not the tensor an in-place one writes)."""
    first = func._schema.arguments[:1]  # an in-place op's first argument is written (torch.Tag.inplace, from 2.8)
    written = bool(first) and first[0].alias_info is not None and first[0].alias_info.is_write and args[0] is tensor
    return tensor.dim() == 0 and POINTWISE in func.tags and not written


def on_cuda(t: torch.Tensor) -> OnCuda:
    """A copy of CPU tensor ``t`` on (pretend) cuda:0."""
    return t if isinstance(t, OnCuda) else OnCuda(t.detach().clone())


def is_cuda_device(device) -> bool:
    return device is not None and not isinstance(device, torch.Tensor) and torch.device(device).type == "cuda"


@dataclasses.dataclass
class GPU:
    """What the pretend GPU saw: reads of GPU values by the CPU, and non_blocking ones read before a synchronize."""
    syncs: int = 0
    unsynced: int = 0
    moved: list = dataclasses.field(default_factory=list)  # every tensor moved onto the GPU: (shape, callers())
    paused: bool = False  # while torch.save takes a module's values from the GPU and puts them back: not counted
    files: set = dataclasses.field(default_factory=set)  # files torch.save wrote GPU tensors to: they load onto it


class _Redirect(TorchFunctionMode):
    """Sends every move to, and every tensor made on, "cuda" to an OnCuda tensor; refuses NumPy views of it."""

    def __init__(self, gpu: GPU):
        super().__init__()
        self.gpu = gpu

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        first = args[0] if args else None
        if isinstance(first, torch.Tensor) and name in ("to", "cuda", "cpu"):
            out = self._move(func, name, first, args[1:], kwargs)
            self._count(first, out, kwargs)
            return out
        if isinstance(first, OnCuda) and name in ("item", "tolist", "__format__", "__bool__", "__float__", "__int__",
                                                  "numpy"):
            self._count(first, None, kwargs)
        if isinstance(first, OnCuda) and name in ("numpy", "__array__"):
            raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the "
                            "tensor to host memory first.")
        if isinstance(first, OnCuda) and name in ("tolist", "item"):
            return getattr(first.elem, name)()
        if is_cuda_device(kwargs.get("device")):  # torch.zeros(..., device="cuda") and the like
            return tree_map(lambda t: OnCuda(t) if isinstance(t, torch.Tensor) else t,
                            func(*args, **{**kwargs, "device": "cpu"}))
        return func(*args, **kwargs)

    def _count(self, tensor, out, kwargs):
        """A read of a GPU value by the CPU (out is not on the GPU), or a tensor moved onto the GPU."""
        if self.gpu.paused:
            return
        if isinstance(tensor, OnCuda) and not isinstance(out, OnCuda):
            self.gpu.syncs += 1
            self.gpu.unsynced += bool(kwargs.get("non_blocking"))
        elif isinstance(out, OnCuda) and not isinstance(tensor, OnCuda):
            self.gpu.moved.append((tuple(tensor.shape), callers()))

    @staticmethod
    def _move(func, name, tensor, rest, kwargs):
        if name in ("cuda", "cpu"):
            target, dtype, memory_format = CUDA if name == "cuda" else torch.device("cpu"), None, None
        else:
            if rest and isinstance(rest[0], torch.Tensor):  # x.to(other): other's device and dtype
                rest = (rest[0].device, rest[0].dtype) + tuple(rest[1:])
            target, dtype, _, memory_format = torch._C._nn._parse_to(*rest, **kwargs)
        values = tensor.elem if isinstance(tensor, OnCuda) else tensor
        if dtype is not None or memory_format is not None:
            values = values.to(dtype=dtype or values.dtype, memory_format=memory_format or torch.preserve_format)
        if target is None:  # only a dtype or layout change: stays where it is
            return values if values is tensor else on_cuda(values) if isinstance(tensor, OnCuda) else values
        if target.type == "cuda":
            return tensor if values is tensor.__dict__.get("elem") else on_cuda(values)
        if target.type == "cpu":  # a copy that still requires grad where the GPU tensor did, as CUDA's does
            return values.clone().requires_grad_(tensor.requires_grad) if isinstance(tensor, OnCuda) else values
        return func(tensor, *rest, **kwargs)


def _save(real_save):
    def save(obj, f, *args, **kwargs):  # saved from cuda: its values, as torch.save writes them
        gpu = _GPUS[-1] if _GPUS else GPU()
        module = isinstance(obj, torch.nn.Module)
        if any(isinstance(t, OnCuda) for t in (obj.parameters() if module else tree_leaves(obj))) \
                and isinstance(f, (str, os.PathLike)):
            gpu.files.add(os.path.realpath(f))
        if module and any(isinstance(p, OnCuda) for p in obj.parameters()):
            gpu.paused = True
            obj.cpu()  # a whole module: pickled from the CPU, then back (the same Parameter objects)
            try:
                return real_save(obj, f, *args, **kwargs)
            finally:
                obj.cuda()
                gpu.paused = False
        return real_save(tree_map(lambda t: t.elem.clone() if isinstance(t, OnCuda) else t, obj), f, *args, **kwargs)
    return save


def _load(real_load):
    def load(f, map_location=None, **kwargs):  # onto "cuda", or saved from it: on cuda:0, as on a GPU
        saved_on_gpu = isinstance(f, (str, os.PathLike)) and os.path.realpath(f) in (_GPUS[-1].files if _GPUS else ())
        if not (is_cuda_device(map_location) or map_location is None and saved_on_gpu):
            return real_load(f, map_location=map_location, **kwargs)
        obj = real_load(f, map_location="cpu", **kwargs)
        return obj.cuda() if isinstance(obj, torch.nn.Module) else tree_map(
            lambda t: on_cuda(t) if type(t) is torch.Tensor else t, obj)
    return load


def _no_real_cuda(*args, **kwargs):
    raise RuntimeError("pretend CUDA: this would start the real CUDA runtime, which a pretend GPU does not have")


ONE_GPU = {  # torch.cuda's answers on a machine with one (pretend) GPU
    "is_available": lambda: True, "device_count": lambda: 1, "current_device": lambda: 0,
    "get_device_name": lambda device=None: "Pretend GPU", "get_device_capability": lambda device=None: (9, 0),
    "is_bf16_supported": lambda *a, **k: True, "synchronize": lambda device=None: None,
    "set_device": lambda device: None, "memory_allocated": lambda device=None: 0,
    "max_memory_allocated": lambda device=None: 0, "reset_peak_memory_stats": lambda device=None: None,
    "empty_cache": lambda: None, "_lazy_init": _no_real_cuda, "is_current_stream_capturing": lambda: False,
    "get_device_properties": lambda device=None: types.SimpleNamespace(
        name="Pretend GPU", total_memory=80 * 2**30, major=9, minor=0, multi_processor_count=132),
}
NO_CAPTURE = types.SimpleNamespace(is_capturing=lambda: False, synchronize=lambda: None)  # the current stream
ACCELERATOR = {"current_stream": lambda *a, **k: NO_CAPTURE, "is_available": lambda: True,
               "current_accelerator": lambda *a, **k: torch.device("cuda"), "current_device_index": lambda: 0,
               "set_device_index": lambda index: None, "device_count": lambda: 1, "synchronize": lambda *a, **k: None}


def _scatter(self, inputs, kwargs, device_ids):
    """DataParallel's scatter onto the one pretend GPU: each tensor copied to it, as a real scatter does."""
    def to_gpu(value):
        return value.cuda() if isinstance(value, torch.Tensor) else value
    return (tree_map(to_gpu, tuple(inputs)),), (tree_map(to_gpu, kwargs or {}),)


@contextlib.contextmanager
def pretend_gpu():
    """One pretend CUDA GPU inside (the module's docstring says what it does); ``as gpu``: its :class:`GPU`."""
    gpu = GPU()
    _GPUS.append(gpu)
    with contextlib.ExitStack() as stack:
        stack.callback(_GPUS.remove, gpu)
        for owner, stand_ins in ((torch.cuda, ONE_GPU), (torch.accelerator, ACCELERATOR)):
            for name, stand_in in stand_ins.items():
                stack.enter_context(mock.patch.object(owner, name, stand_in))
        stack.enter_context(mock.patch.object(torch.version, "cuda", torch.version.cuda or "13.0"))
        # pinned memory needs a driver; the DataLoader's pinning thread does not see the mode below
        stack.enter_context(mock.patch.object(torch.Tensor, "pin_memory", lambda self, device=None: self))
        stack.enter_context(mock.patch.object(torch, "save", _save(torch.save)))
        stack.enter_context(mock.patch.object(torch, "load", _load(torch.load)))
        stack.enter_context(mock.patch.object(torch.nn.DataParallel, "scatter", _scatter))
        # module.to(cuda) keeps its Parameter objects, as on a GPU (an optimizer made before still holds them)
        swap = torch.__future__.get_swap_module_params_on_conversion()
        torch.__future__.set_swap_module_params_on_conversion(True)
        stack.callback(torch.__future__.set_swap_module_params_on_conversion, swap)
        stack.enter_context(_Redirect(gpu))
        yield gpu
