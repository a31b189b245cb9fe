"""PyTorch support: tensors, Parameters and Modules as trace values, without importing torch.

torch is looked up in ``sys.modules``: an object can only be a torch tensor if
the user already imported torch, so numpy-only programs never pay for (or need)
the import.
"""

import sys

import numpy as np

from . import _core, errors

# The wire value of bfloat16, from the C++ dtype table.
_BFLOAT16 = next(value for value, name, _, _ in _core.dtype_table() if name == "bfloat16")


def _torch():
    return sys.modules.get("torch")


def is_tensor(obj):
    torch = _torch()
    return torch is not None and isinstance(obj, torch.Tensor)


def is_module(obj):
    torch = _torch()
    return torch is not None and isinstance(obj, torch.nn.Module)


def _check_dtype(key, tensor):
    if tensor.dtype not in _supported(_torch()):
        raise TypeError(
            f"xdl_trace: key '{key}': unsupported torch dtype {tensor.dtype} "
            "(supported: bool, int8..int64, uint8, float16, bfloat16, float32, float64)"
        )


_SUPPORTED = None


def _supported(torch):
    global _SUPPORTED
    if _SUPPORTED is None:
        _SUPPORTED = frozenset(
            (
                torch.bool,
                torch.int8,
                torch.int16,
                torch.int32,
                torch.int64,
                torch.uint8,
                torch.float16,
                torch.bfloat16,
                torch.float32,
                torch.float64,
            )
        )
    return _SUPPORTED


def host_array(key, tensor):
    """A host numpy array (or (array, dtype code) for bfloat16) with the tensor's current values.

    CPU contiguous tensors are shared without a copy; CUDA tensors are copied to host;
    non-contiguous ones are made contiguous (a copy).
    """
    torch = _torch()
    _check_dtype(key, tensor)
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if not t.is_contiguous():
        t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy(), _BFLOAT16
    return t.numpy()


def stable_view(key, tensor):
    """(array, dtype code) sharing the tensor's memory when that memory can be read in place at
    every traced step (CPU and contiguous), else None (the caller reads it each step).
    """
    _check_dtype(key, tensor)
    if tensor.device.type != "cpu" or not tensor.is_contiguous():
        return None
    value = host_array(key, tensor)
    return value if isinstance(value, tuple) else (value, -1)


def grad_provider(key, name, parameter):
    """A provider reading ``parameter.grad`` at each traced step."""

    def read_grad():
        grad = parameter.grad
        if grad is None:
            raise errors.FailedPreconditionError(
                f"xdl_trace: gradient '{key}': '{name}'.grad is None "
                "(call backward() before the traced step)"
            )
        return host_array(key, grad)

    return read_grad


def named_parameters(module):
    return list(module.named_parameters())
