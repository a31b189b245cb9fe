"""``xdl.watch(model)``: trace a model's parameters, gradients and (optionally) activations in one call.

    keys = xdl.watch(model)                       # stats of every parameter and its gradient
    keys = xdl.watch(model, activations=True, summary=None, every=10)
    with xdl.TraceHook({"output_dir": "out"}) as hook:
        for batch in data:
            loss = model(batch).sum(); loss.backward(); opt.step()
            hook.step()

Keys: a parameter keeps its ``named_parameters()`` name, its gradient is ``gradient/<name>``
(trace_gradient's convention, so the report pairs them into gradient norm / weight norm), a
leaf module's output is ``activation/<module name>``; all under ``scope/`` when a scope is given.
"""

import warnings

import numpy as np

from .. import _core, _names, errors
from . import _device, _torch, api, ranges as _ranges

__all__ = ["watch"]

_SKIPPED = np.zeros(0, np.float32)  # What a skipped step writes (as trace_once does later on).


def _every(n, read):
    """`read` on the steps _device.EveryN(n) selects, an empty float32 column on the others;
    `read` itself when n is None."""
    if n is None:
        return read
    due = _device.EveryN(n)

    def provider():
        return read() if due() else _SKIPPED

    return provider


def _register(kind, scope, key, read, summary, declared=None):
    """Registers provider `read`; `declared` (_input_of) declares the tensor it yields."""
    summary, bins = api.summary_spec(scope, key, summary)
    with api.registering(scope, key):
        api.registry().register_provider(scope, key, kind, read, summary, bins, *(declared or ()))


def _input_of(parameter):
    """What the Header declares a parameter's entries read, as register_provider takes it: its
    gradient and digests hold its dtype and shape for the whole run (torch sees to a gradient's)."""
    return _device.wire_dtype(parameter), list(parameter.shape)


def _first_tensor(output):
    if _torch.is_tensor(output):
        return output
    if isinstance(output, (tuple, list)):
        for item in output:
            found = _first_tensor(item)
            if found is not None:
                return found
    if isinstance(output, dict):
        for item in output.values():
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


def watch(
    model,
    gradients=True,
    activations=False,
    summary="stats",
    every=None,
    scope=None,
    optimizer=None,
    marks=None,
    digest=True,
    buffers=True,
):
    """Registers a model's tensors for tracing and returns their full keys.

    model: a torch ``nn.Module`` (parameters, their gradients, and with `activations` the output
        of every leaf module, captured by a forward hook), or a dict of name -> numpy array
        (parameters only: deliver gradients yourself with trace_gradient/send_gradient). A model
        wrapped by DistributedDataParallel, DataParallel or torch.compile is watched under its
        own names, without the wrapper's "module." / "_orig_mod." prefix.
    gradients: also trace each parameter's ``.grad`` (read at the traced step, after backward)
        for parameters that require grad.
    activations: also trace each leaf module's latest forward output (detached; the first tensor
        when the output is a tuple, list or dict).
    summary: "stats" (default), "histogram", "digest" (an exact 64-bit checksum: what
        ``xdl.diff`` needs to tell ranks or runs apart exactly), None (the full tensors) or a
        callable, as for trace_tensor.
    every: None (every traced step) or N: the watched keys are captured at the first and then
        every N-th step the hook traces (counted per key; the hook's filter decides which steps
        are traced at all); on the other traced steps they hold an empty float32 column, as a
        trace_once key does after its first step, so other keys can be traced more often.
        Readers skip empty columns (``stack``, the report, find-nan). With a built-in summary
        a skipped step holds the summary of an empty tensor (a stats row with count 0 and NaN
        min/max/mean/std), which find-nan reads as NaN until columns describe themselves.
    scope: register under this scope (keys become ``scope/<key>``).
    optimizer: each of its param groups' learning rate is traced at every traced step, as
        ``optimizer/lr`` (one group) or ``optimizer/<i>/lr`` (group i of several), what a
        scheduler set it to; and its ``step()`` is marked as an "optimizer" range (with
        `marks`; torch >= 2.0 marks every optimizer's step without it).
    marks: mark each module's forward and each leaf module's backward as host ranges
        (xdl_trace/write/ranges.py), so the report gives each kernel the layer and phase that
        launched it (docs/report.md "GPU time by module"); a torch model only. None (default):
        marked when the model has a parameter on a device (a CPU model launches no kernels to
        attribute, and on a small one the hooks cost more than its step); True or False forces.
    digest: also record each watched tensor's exact digest beside its summary, under the
        companion key ``digest/<key>`` (``<scope>/digest/<key>`` in a scope; format.md "Tensor
        digest"), so ``xdl.diff`` of two runs or ranks is exact where summaries alone prove
        nothing (``diff`` folds ``digest/K`` into K). Default True (its cost: docs/python.md
        "watch"); no companion where the summary is already exact (None: the full tensors, or
        "digest"). The report leaves digests out of its curves and alerts.
    buffers: True (default): also trace the running statistics of the normalization layers
        (BatchNorm, SyncBatchNorm, InstanceNorm with track_running_stats) under their state_dict
        names, read in place like the parameters (with their digests): the state that eval uses
        and training does not, where a NaN hides from the loss. "all": every floating-point
        persistent buffer (an EMA's weights, spectral norm's vectors; constants too, such as a
        positional-encoding table, which the report then says never change). False: none
        (``_torch.state_buffers``). Registered as tensors, not variables: each rank updates
        them from its own batch, so ``diff --ranks`` leaves them out by rule.
    """
    if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
        raise errors.InvalidArgumentError(f"xdl_trace: watch(every=): {every!r} is not an int >= 1")
    if buffers not in (True, False, "all"):
        raise errors.InvalidArgumentError(
            f"xdl_trace: watch(buffers=): {buffers!r} is not True, False or 'all'"
        )
    scope_s = api.scope_name(scope)
    keys = []
    bins = _core.DEFAULT_HISTOGRAM_BINS
    digest = bool(digest) and summary not in (None, "digest")  # Else the summary is exact.
    if optimizer is not None:
        keys += _watch_learning_rates(optimizer, scope)

    if isinstance(model, dict):
        for name, value in model.items():
            if not isinstance(value, np.ndarray):
                raise TypeError(
                    f"xdl_trace: watch: '{name}' is a {type(value).__name__}, not a numpy array"
                )
            read = lambda v=value: v  # noqa: E731
            kind = _core.EntryKind.VARIABLE
            keys.append(_watch_in_place(kind, name, value, read, scope, scope_s, summary, every))
            if digest:
                _watch_digest(_core.EntryKind.VARIABLE, scope_s, name, read, every)
        return keys
    if not _torch.is_module(model):
        raise TypeError(
            "xdl_trace: watch expects a torch nn.Module or a dict of numpy arrays, "
            f"got {type(model).__name__}"
        )
    model = _torch.unwrapped(model)  # DDP, DataParallel, torch.compile: the model's own names.
    parameters = _torch.named_parameters(model)
    state = _torch.state_buffers(model, every=buffers == "all") if buffers else []
    if marks is None:
        marks = any(p.device.type != "cpu" for _, p in parameters)
    if marks:
        _ranges.mark_modules(model)
        if optimizer is not None:
            _ranges.mark_optimizer(optimizer)
        else:
            _ranges.mark_every_optimizer()
    if parameters and _device_group_fits(parameters + state, summary):
        return keys + _watch_on_device(
            model, parameters, state, gradients, activations, summary, every, scope_s, digest
        )
    for kind, named in ((_core.EntryKind.VARIABLE, parameters), (_core.EntryKind.TENSOR, state)):
        for name, tensor in named:
            read = lambda t=tensor, k=name: _torch.capture(k, t, summary, bins)  # noqa: E731
            keys.append(_watch_in_place(kind, name, tensor, read, scope, scope_s, summary, every))
            if digest:
                read = lambda t=tensor: t  # noqa: E731  (a CPU tensor: digested in C++)
                _watch_digest(kind, scope_s, name, read, every, tensor)
    if gradients:
        said = []  # A gradient missing at a step: said once for the model.
        for name, parameter in parameters:
            if not parameter.requires_grad:
                continue
            key = _names.gradient_key(name)
            full_key = api.full_key(scope_s, key)
            read = _torch.grad_provider(full_key, name, parameter, summary, bins, said)
            _register(
                _core.EntryKind.GRADIENT,
                scope_s,
                key,
                _every(every, read),
                summary,
                _input_of(parameter),
            )
            api.note_gradient_read(name)
            keys.append(full_key)
            if digest:
                read = _torch.grad_reader(full_key, name, parameter, said)
                _watch_digest(_core.EntryKind.GRADIENT, scope_s, key, read, every, parameter)
    if activations:
        keys += _watch_activations(model, summary, every, scope_s, digest)
    return keys


def _watch_learning_rates(optimizer, scope):
    """Traces each param group's "lr" (a callback reading it at the traced step: a scheduler's
    change shows at once, and diff names the group whose rate parted first); its full keys."""
    groups = getattr(optimizer, "param_groups", None)
    if not isinstance(groups, list):
        raise TypeError(
            f"xdl_trace: watch(optimizer=): a {type(optimizer).__name__} has no param_groups "
            "list; pass a torch.optim.Optimizer"
        )
    keys, watched, said = [], len(groups), []

    def rate(group, first):
        if first and len(groups) != watched and not said:  # One len() a traced step.
            said.append(True)
            warnings.warn(
                f"xdl_trace: the {type(optimizer).__name__} has {len(groups)} param groups, "
                f"{watched} when watched: the learning rates of groups added since "
                "(add_param_group, as in gradual unfreezing) are not traced. Add the groups "
                "before xdl.watch(..., optimizer=) (lr 0 until they train), or trace one with "
                "xdl.trace_callback (warned once)",
                RuntimeWarning,
                stacklevel=errors.caller_stacklevel(),
            )
        return float(group["lr"])

    for i, group in enumerate(groups):
        if "lr" not in group:
            continue
        key = _names.learning_rate_key(i, len(groups))
        first = not keys
        api.trace_callback(key, lambda group=group, first=first: rate(group, first), scope=scope)
        keys.append(api.full_key(api.scope_name(scope), key))
    return keys


def _watch_digest(kind, scope_s, key, read, every, parameter=None):
    """Registers the companion ``digest/<key>`` of a watched key: the digest of what `read`
    returns (a numpy array or a torch tensor), on the same steps (not among the keys watch
    returns: it stands beside one of them); of `parameter` or its gradient where given."""
    companion = _names.digest_key(key)
    full_key = api.full_key(scope_s, companion)
    bins = _core.DEFAULT_HISTOGRAM_BINS

    def provider():
        value = read()
        if _torch.is_tensor(value):  # On a device: one more pass of the step's batch.
            return _torch.capture(full_key, value, "digest", bins)
        return value

    declared = None if parameter is None else _input_of(parameter)
    _register(kind, scope_s, companion, _every(every, provider), "digest", declared)


def _watch_in_place(kind, name, value, read, scope, scope_s, summary, every):
    """Registers one parameter (kind VARIABLE) or state buffer (TENSOR): by reference at every
    traced step, or with `every` through `read` (its host value) every N-th; returns its full
    key. A parameter is remembered for its gradient."""
    if every is None:
        trace = api.trace_variable if kind == _core.EntryKind.VARIABLE else api.trace_buffer
        trace(name, value, scope=scope, summary=summary)
    else:
        _register(kind, scope_s, name, _every(every, read), summary, _input_of(value))
        if kind == _core.EntryKind.VARIABLE:
            api.remember_variable(scope_s, name, value)
    return api.full_key(scope_s, name)


def _device_group_fits(parameters, summary):
    """Whether the parameters live on a device (CUDA) and can be read as groups: one batch of
    device work per step for all of them (a callable summary needs host arrays)."""
    return (summary is None or isinstance(summary, str)) and all(
        _device.backend_for(p) is not None for _, p in parameters
    )


def _watch_on_device(
    model, parameters, state, gradients, activations, summary, every, scope_s, digest
):
    """watch() of a model on a device: parameters as one group, its state buffers as another,
    gradients as a third (_device.GroupCapture), so a traced step stages them in three items,
    not one per tensor; with `digest`, each group's companion digests as one more group (one
    more reduction pass)."""
    bins = _core.DEFAULT_HISTOGRAM_BINS
    keys = []

    def register(kind, names, reads, of, summary=summary, companion=False):
        """`names` read by `reads`, as one group: the values (or gradients) of parameters `of`."""
        full = [api.full_key(scope_s, name) for name in names]
        group = _device.GroupCapture(scope_s, full, reads, summary, bins, every, _torch.host_array)
        for index, (name, parameter) in enumerate(zip(names, of)):
            _register(kind, scope_s, name, group.member(index), summary, _input_of(parameter))
        _device.add_group(group)
        if companion:
            return  # The digests beside a group: not among the keys watch returns.
        keys.extend(full)
        if digest:
            digests = [_names.digest_key(name) for name in names]
            register(kind, digests, reads, of, "digest", companion=True)

    names = [name for name, _ in parameters]
    register(
        _core.EntryKind.VARIABLE,
        names,
        [lambda p=p: p for _, p in parameters],
        [p for _, p in parameters],
    )
    for name, parameter in parameters:
        api.remember_variable(scope_s, name, parameter)
    if state:
        register(
            _core.EntryKind.TENSOR,
            [name for name, _ in state],
            [lambda b=b: b for _, b in state],
            [b for _, b in state],
        )
    trained = [(name, p) for name, p in parameters if p.requires_grad]
    if gradients and trained:
        grad_names = [_names.gradient_key(name) for name, _ in trained]
        said = []  # A gradient missing at a step: said once for the model.
        reads = [
            _torch.grad_reader(api.full_key(scope_s, key), name, p, said)
            for key, (name, p) in zip(grad_names, trained)
        ]
        register(_core.EntryKind.GRADIENT, grad_names, reads, [p for _, p in trained])
        for name, _ in trained:
            api.note_gradient_read(name)
    if activations:
        keys += _watch_activations(model, summary, every, scope_s, digest)
    return keys


def _watch_activations(model, summary, every, scope_s, digest):
    bins = _core.DEFAULT_HISTOGRAM_BINS
    keys = []
    said = set()  # Why a leaf's column was empty: each said once for the model (12 out_proj).

    for name, module in model.named_modules():
        if any(True for _ in module.children()):
            continue  # Not a leaf.
        key = f"activation/{name or type(module).__name__}"
        full_key = api.full_key(scope_s, key)
        latest = {}

        def keep(_module, _inputs, output, latest=latest):
            tensor = _first_tensor(output)
            latest["output"] = None if tensor is None else tensor.detach()
            latest["step"] = api.steps_ended(scope_s)  # Of the step this forward belongs to.

        module.register_forward_hook(keep)

        def output(latest=latest, full_key=full_key, name=name):
            tensor = latest.get("output")
            if tensor is not None and latest["step"] == api.steps_ended(scope_s):
                return tensor
            # An empty column, not a failed step: the step's other keys are kept. A leaf whose
            # parent calls its parameters directly never runs a forward pass of its own; one a
            # step skipped holds an older step's output, which is not this step's value.
            why = "never" if tensor is None else "skipped"
            if why not in said:
                said.add(why)
                warnings.warn(
                    f"xdl_trace: activation '{full_key}': module '{name}' "
                    + (
                        "has run no forward pass before a traced step, so its column is empty "
                        "there (and so is that of any other leaf without one: a module whose "
                        "parent uses its parameters directly, as MultiheadAttention does its "
                        "out_proj, never runs one; otherwise call hook.step() after the forward)"
                        if why == "never"
                        else "ran no forward pass since the previous hook.step(), so its column "
                        "is empty at this traced step (and so is that of any other leaf the "
                        "step did not run: a branch or an expert not taken), not an older "
                        "step's output"
                    ),
                    RuntimeWarning,
                    stacklevel=errors.caller_stacklevel(),
                )
            return _SKIPPED

        def read(output=output, full_key=full_key):
            tensor = output()
            return (
                _SKIPPED if tensor is _SKIPPED else _torch.capture(full_key, tensor, summary, bins)
            )

        _register(_core.EntryKind.TENSOR, scope_s, key, _every(every, read), summary)
        keys.append(full_key)
        if digest:
            _watch_digest(_core.EntryKind.TENSOR, scope_s, key, output, every)
    return keys
