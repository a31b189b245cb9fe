"""Names the trace files carry that both wings use: what the write side names a key or a run
metadata entry, and the read side recognises (docs/format.md)."""

from . import _core

# A wire dtype's value by its name ("float32": 4, "bfloat16": ...): the C++ dtype table's.
WIRE_DTYPE = {name: value for value, name, _, _ in _core.dtype_table()}

# A traced gradient of <name>: "gradient/<name>" (in a scope, "<scope>/gradient/<name>").
GRADIENT_PART = "gradient"
# watch(digest=True)'s companion of a key: "digest/<key>" (in a scope, "<scope>/digest/<key>").
DIGEST_PART = "digest"
# The run metadata entry of TraceHook(replicated=[globs]): the keys that data parallelism keeps
# equal on every rank (what `diff --ranks` and the report compare across ranks).
REPLICATED_ENTRY = "xdl_trace.replicated"


def gradient_key(name):
    """The key of the gradient of `name`, within its scope."""
    return f"{GRADIENT_PART}/{name}"


def digest_key(key):
    """The key of the digest beside `key`, within its scope."""
    return f"{DIGEST_PART}/{key}"
