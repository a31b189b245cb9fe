"""Names the trace files carry that both wings use: what the write side names a key or a run
metadata entry, and the read side recognises (docs/format.md)."""

from . import _core

# A wire dtype's value by its name ("float32": 4, "bfloat16": ...): the C++ dtype table's.
WIRE_DTYPE = {name: value for value, name, _, _ in _core.dtype_table()}

# A traced gradient of <name>: "gradient/<name>" (in a scope, "<scope>/gradient/<name>").
GRADIENT_PART = "gradient"
# watch(digest=True)'s companion of a key: "digest/<key>" (in a scope, "<scope>/digest/<key>").
DIGEST_PART = "digest"
# watch(optimizer=)'s learning rate of a param group: "optimizer/lr" (one group), else
# "optimizer/<i>/lr" (in a scope, "<scope>/optimizer/..."). Equal on every data-parallel rank,
# and upstream of every tensor the step updates: diff compares it across ranks and, of the keys
# that part at one gstep, names it first.
OPTIMIZER_PART = "optimizer"
# The run metadata entry of TraceHook(replicated=[globs]): the keys that data parallelism keeps
# equal on every rank (what `diff --ranks` and the report compare across ranks).
REPLICATED_ENTRY = "xdl_trace.replicated"


def gradient_key(name):
    """The key of the gradient of `name`, within its scope."""
    return f"{GRADIENT_PART}/{name}"


def learning_rate_key(group, groups):
    """The key of param group `group`'s learning rate (of `groups`), within its scope."""
    return f"{OPTIMIZER_PART}/lr" if groups == 1 else f"{OPTIMIZER_PART}/{group}/lr"


def digest_key(key):
    """The key of the digest beside `key`, within its scope."""
    return f"{DIGEST_PART}/{key}"
