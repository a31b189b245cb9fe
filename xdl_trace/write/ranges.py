"""Named host ranges: which module (forward, backward) or optimizer step the host was running,
so the report can give each kernel the layer and phase that launched it.

    with xdl.host_range("data"): batch = next(loader)   # any code of yours
    xdl.watch(model, optimizer=opt)                     # every module's forward and backward,
                                                        # the optimizer's step

A range is a HostSpan RANGE (docs/format.md "Host spans": name, category, the OS thread that ran
it) riding in the next record of a live tracer (record/host_ranges.h); while no tracer is live a
range costs its hooks and one call that keeps nothing. Kernels are joined to ranges by their
launch call (gpu_steps.module_table): the innermost range on the launching thread holding the
call's start.

Marks (watch(model)):
* forward: every module, from its forward pre-hook to its forward hook (nested: a block holds
  its layers), on the thread that ran it;
* backward: every leaf module, from the moment the gradient of its output reaches autograd (a
  hook on that tensor, which runs just before the module's last operation is differentiated) to
  the next such moment on that thread, or the end of the backward pass (autograd's queued
  callback). No full backward hooks: those refuse a module whose output is then modified in
  place (``ReLU(inplace=True)``). On a GPU, backward runs on autograd's device thread;
* optimizer: ``optimizer.step()`` of the optimizer given to watch (its step wrapped as a bound
  method, which LR schedulers keep wrapping), or of every optimizer where torch has global
  optimizer hooks (torch >= 2.0) and none was given.
"""

import contextlib
import threading
import time
import types
import weakref

from .. import _core

__all__ = [
    "host_range",
    "mark_modules",
    "mark_optimizer",
    "mark_every_optimizer",
    "unmark",
    "FORWARD",
    "BACKWARD",
    "OPTIMIZER",
]

FORWARD, BACKWARD, OPTIMIZER = "forward", "backward", "optimizer"  # The categories watch uses.
_MAX_OPEN = 64  # Forward starts kept per module (a forward that raised leaves one behind).

# Modules and optimizers marked (marks are idempotent) -> what unmark() undoes: a module's hook
# handles; True for an optimizer (its wrapped step is an instance attribute).
_marked = weakref.WeakKeyDictionary()
_global_optimizer_hooks = False
# OS thread id -> the open backward range (id, start ns) of that thread. Autograd's hooks and its
# end-of-pass callback may run on different threads; the GIL guards the dict.
_open_backward_ranges = {}


@contextlib.contextmanager
def host_range(name, category=""):
    """A named host range around a block of code, on the calling thread."""
    rid = _core.range_id(str(name), str(category))
    start = time.time_ns()
    try:
        yield
    finally:
        _core.note_range(rid, start)


def _module_label(name, module):
    return name or type(module).__name__  # The root module is named by its class.


def mark_modules(model):
    """Marks each module's forward and each leaf module's backward (module docstring)."""
    import torch  # A torch module was given: torch is imported already.

    for name, module in model.named_modules():
        if module in _marked:
            continue
        label = _module_label(name, module)
        forward_id = _core.range_id(label, FORWARD)
        starts = []

        def before(_module, _inputs, starts=starts):
            if len(starts) >= _MAX_OPEN:
                del starts[0]
            starts.append(time.time_ns())

        leaf = not any(True for _ in module.children())
        backward_id = _core.range_id(label, BACKWARD) if leaf else None

        def grad_arrives(grad, rid=backward_id):
            _open_backward(torch, rid)
            return None

        if not leaf:
            grad_arrives = None

        def after(_module, _inputs, output, starts=starts, rid=forward_id, hook=grad_arrives):
            if starts:
                _core.note_range(rid, starts.pop())
            if hook is not None:  # Backward: leaf modules only (module docstring).
                tensor = _first_grad_tensor(torch.Tensor, output)
                if tensor is not None:
                    tensor.register_hook(hook)

        _marked[module] = [
            module.register_forward_pre_hook(before),
            module.register_forward_hook(after),
        ]


def _first_grad_tensor(tensor_type, output):
    """The first tensor of a module's output that autograd will differentiate, else None."""
    if isinstance(output, tensor_type):
        return output if output.grad_fn is not None else None
    if isinstance(output, (tuple, list)):
        for item in output:
            found = _first_grad_tensor(tensor_type, item)
            if found is not None:
                return found
    if isinstance(output, dict):
        for item in output.values():
            found = _first_grad_tensor(tensor_type, item)
            if found is not None:
                return found
    return None


def _open_backward(torch, rid):
    """Closes the open backward range of this thread (if any) and opens `rid`'s; the first of a
    backward pass asks autograd to close the last one when the pass ends (that callback may run
    on another thread: the range keeps the thread that ran it)."""
    now = time.time_ns()
    thread = threading.get_native_id()
    current = _open_backward_ranges.get(thread)
    if current is None:
        torch.autograd.Variable._execution_engine.queue_callback(_close_backward)
    else:
        _core.note_range(current[0], current[1], thread, now)  # Ends where the next begins.
    _open_backward_ranges[thread] = (rid, now)


def _close_backward():
    for thread, (rid, start) in list(_open_backward_ranges.items()):
        del _open_backward_ranges[thread]
        _core.note_range(rid, start, thread)


def mark_optimizer(optimizer):
    """Marks ``optimizer.step()`` as an "optimizer" range named by its class."""
    if optimizer in _marked:
        return
    rid = _core.range_id(type(optimizer).__name__, OPTIMIZER)
    step = optimizer.step

    def marked_step(self, *args, **kwargs):
        start = time.time_ns()
        try:
            return step(*args, **kwargs)
        finally:
            _core.note_range(rid, start)

    optimizer.step = types.MethodType(marked_step, optimizer)
    _marked[optimizer] = True  # Not the step: a bound method would keep the optimizer alive.


def unmark(obj):
    """Takes back the marks of a model (every module of it) or an optimizer; a module's open
    forward ranges are dropped. Marks made by torch's global optimizer hooks stay."""
    for item in obj.modules() if hasattr(obj, "modules") else (obj,):
        undo = _marked.pop(item, None)
        if isinstance(undo, list):
            for handle in undo:
                handle.remove()
        elif undo is not None and "step" in vars(item):
            del item.step  # The class's step again.


def mark_every_optimizer():
    """Where torch has global optimizer step hooks (>= 2.0), marks every optimizer's step;
    False where it has none."""
    global _global_optimizer_hooks
    import torch.optim.optimizer as module  # Called for a torch model: torch is imported.

    pre = getattr(module, "register_optimizer_step_pre_hook", None)
    post = getattr(module, "register_optimizer_step_post_hook", None)
    if pre is None or post is None:
        return False
    if _global_optimizer_hooks:
        return True
    _global_optimizer_hooks = True
    starts = threading.local()

    def before(optimizer, _args, _kwargs):
        if optimizer not in _marked:  # One given to watch is marked by its own wrapper.
            starts.value = time.time_ns()

    def after(optimizer, _args, _kwargs):
        start = getattr(starts, "value", None)
        starts.value = None
        if start is not None:
            _core.note_range(_core.range_id(type(optimizer).__name__, OPTIMIZER), start)

    pre(before)
    post(after)
    return True
