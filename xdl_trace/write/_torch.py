"""PyTorch support: tensors, Parameters and Modules as trace values, without importing torch.

torch is looked up in ``sys.modules``: an object can only be a torch tensor if
the user already imported torch, so numpy-only programs never pay for (or need)
the import.
"""

import sys
import warnings


from .. import _core, errors
from .._names import WIRE_DTYPE
from . import _device

_BFLOAT16 = WIRE_DTYPE["bfloat16"]


def _torch():
    return sys.modules.get("torch")


def is_tensor(obj):
    torch = _torch()
    return torch is not None and isinstance(obj, torch.Tensor)


def is_module(obj):
    torch = _torch()
    return torch is not None and isinstance(obj, torch.nn.Module)


def check_dtype(key, tensor):
    torch = _torch()
    if tensor.dtype not in _supported(torch):
        raise TypeError(
            f"xdl_trace: key '{key}': unsupported torch dtype {tensor.dtype} "
            f"(supported: {', '.join(str(d).replace('torch.', '') for d in _supported(torch))})"
        )


_SUPPORTED = None


def _supported(torch):
    """The torch dtypes of the dtype table's rows (by name; "byte" is torch.uint8), in its order."""
    global _SUPPORTED
    if _SUPPORTED is None:
        found = (getattr(torch, name, None) for _, name, _, _ in _core.dtype_table())
        _SUPPORTED = tuple(dict.fromkeys(d for d in found if isinstance(d, torch.dtype)))
    return _SUPPORTED


def host_array(key, tensor):
    """A host numpy array (or (array, dtype code) for bfloat16) with the tensor's current values.

    CPU contiguous tensors are shared without a copy; CUDA tensors are copied to host;
    non-contiguous ones are made contiguous (a copy).
    """
    torch = _torch()
    check_dtype(key, tensor)
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if not t.is_contiguous():
        t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy(), _BFLOAT16
    return t.numpy()


def capture(key, tensor, summary=None, bins=_core.DEFAULT_HISTOGRAM_BINS):
    """What a provider hands the core for `tensor` at a traced step.

    A device tensor met inside ``hook.step()`` joins the step's batch (_device.py): its summary
    (None, "stats", "histogram" or "digest") is computed on the device and its bytes copied
    asynchronously, so nothing waits for the device. Otherwise, and for a callable summary
    (which takes a host array), the values are read on the host now (host_array).
    """
    check_dtype(key, tensor)
    batch = _device.active_batch()
    if batch is not None and (summary is None or isinstance(summary, str)):
        backend = _device.backend_for(tensor)
        if backend is not None and batch.accepts(backend):
            return batch.add(tensor, summary, bins, backend)
    return host_array(key, tensor)


def stable_view(key, tensor):
    """(array, dtype code) sharing the tensor's memory when that memory can be read in place at
    every traced step (CPU and contiguous), else None (the caller reads it each step).
    """
    check_dtype(key, tensor)
    if tensor.device.type != "cpu" or not tensor.is_contiguous():
        return None
    if _device.backend_for(tensor) is not None:  # A fake device's tensors are read through it.
        return None
    value = host_array(key, tensor)
    return value if isinstance(value, tuple) else (value, -1)


def dense(tensor):
    """`tensor` as a strided tensor: a sparse one (nn.Embedding(sparse=True)'s gradient) made
    dense, as the tensor its values stand for (its size in memory, once per traced step)."""
    return tensor if tensor.layout == _torch().strided else tensor.to_dense()


def placement(tensor):
    """Where a tensor's values lie: (device, dtype, shape, address); what in-place reading
    holds on to."""
    return (str(tensor.device), str(tensor.dtype), tuple(tensor.shape), tensor.data_ptr())


def describe_placement(where):
    device, dtype, shape, address = where
    return f"{dtype.rsplit('.', 1)[-1]}{list(shape)} on {device} at {address:#x}"


def grad_reader(key, name, parameter, said=None):
    """A function returning ``parameter.grad`` now. Where it is None (no gradient at this step:
    a parameter the loss did not use, under zero_grad(set_to_none=True), torch's default), an
    empty tensor of its dtype on its device, so that the step's columns of it are empty and its
    other keys are written; said once through `said` (a list the readers of one registration
    share: a model's hundred parameters warn once)."""
    said = [] if said is None else said

    def read_grad():
        grad = parameter.grad
        if grad is None:
            if not said:
                said.append(key)
                warnings.warn(
                    f"xdl_trace: gradient '{key}': '{name}'.grad is None at a traced step, so "
                    "its column is empty there (and so is that of any other parameter without "
                    "a gradient): a parameter the loss did not use, after zero_grad("
                    "set_to_none=True), torch's default; or hook.step() called before backward()",
                    RuntimeWarning,
                    stacklevel=errors.caller_stacklevel(),
                )
            return parameter.detach().new_empty(0)
        return dense(grad)

    return read_grad


def grad_provider(key, name, parameter, summary=None, bins=_core.DEFAULT_HISTOGRAM_BINS, said=None):
    """A provider reading ``parameter.grad`` at each traced step (captured as `capture` does)."""
    read = grad_reader(key, name, parameter, said)
    return lambda: capture(key, read(), summary, bins)


def named_parameters(module):
    return list(module.named_parameters())


def state_buffers(module, every=False):
    """The floating-point buffers of a module's state (persistent: in its state_dict), by their
    state_dict names: those of normalization layers that keep running statistics (BatchNorm,
    SyncBatchNorm, InstanceNorm with track_running_stats: running_mean, running_var), or with
    `every` those of every module (an EMA's weights, spectral norm's vectors, and constants such
    as a positional-encoding table or FrozenBatchNorm2d's statistics). Integer and bool buffers
    (num_batches_tracked, masks, index tables) and non-persistent ones (caches) are left out."""
    torch = _torch()
    norm = getattr(torch.nn.modules.batchnorm, "_NormBase", ())  # BatchNorm*, InstanceNorm*.
    seen, out = set(), []
    for prefix, sub in module.named_modules():
        if not every and not isinstance(sub, norm):
            continue
        transient = getattr(sub, "_non_persistent_buffers_set", ())
        for name, value in sub.named_buffers(recurse=False):
            if name in transient or id(value) in seen or not value.is_floating_point():
                continue
            seen.add(id(value))
            out.append((f"{prefix}.{name}" if prefix else name, value))
    return out


def unwrapped(module):
    """The model a training wrapper runs: DistributedDataParallel's and DataParallel's
    ``.module``, torch.compile's ``_orig_mod`` (nested wrappers too), else `module` itself.
    Their parameters and submodules are the model's under a prefix ("module.", "_orig_mod."), so
    a model watched through one keeps the names it has unwrapped, and a DDP or compiled run
    diffs key for key against a plain one (the names HF's ``unwrap_model`` gives a state dict)."""
    torch = _torch()
    parallel = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    while True:
        if isinstance(module, parallel):
            module = module.module
        elif type(module).__name__ == "OptimizedModule" and isinstance(
            getattr(module, "_orig_mod", None), torch.nn.Module
        ):
            module = module._orig_mod
        else:
            return module
