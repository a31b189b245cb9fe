"""One schema: every table derived from proto/*.proto or the C++ dtype table has one definition.

Issue 8 asks for either a test that adds a field to a copy of the Meta proto and shows it flows
through, or a check that each schema-derived table is defined once. We check the latter. The
bug we guard against is a second, hand-written copy of a table that nothing keeps in step (the
hand-built device-trace descriptor timeline.py used to carry, the dtype lists of conftest.py and
the bindings). A flow-through test on a modified .proto copy could only reach Python's
protobuf classes (the C++ core is compiled against the real .proto), so it would prove that
protobuf works, not that the tree holds no copies. Instead the scan below looks for the shape of
a copy (many dtype names or enum value names written together, a descriptor built by hand, a
field number spelled as a literal) and fails naming the file; a positive control (a planted
copy, in the shape the stand-alone tools/read_trace.py carried before it read the build's
descriptor set) proves the scan finds a real copy.
"""

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from conftest import REPO
from xdl_trace import _core
from xdl_trace._proto import device_trace_pb2, xdl_trace_pb2, xplane_pb2

# The stand-alone reader (numpy + protobuf only, copied anywhere with the descriptor set the
# build writes beside it): it builds its message classes from that descriptor set, and spells
# the Type values numpy names differently (XDL's Float, Double, Byte; bfloat16's bits).
STANDALONE = os.path.join("xdl_trace", "tools", "read_trace.py")
# Code (not data) with one branch per dtype: none (the summaries read elements by the table's
# kind and size, cpp/src/summary/summary.cc), and it stays that way.
PER_DTYPE_CODE = set()
# The definition itself.
DTYPE_TABLE = os.path.join("cpp", "src", "core", "dtype.cc")
# Copies known and not yet removed. An entry that no longer holds a copy fails the test, so the
# list only shrinks (empty now: the reader's numpy names come from the table).
PENDING = set()

WINDOW = 16  # Lines: a table is written in one place.
MIN_DTYPES = 6  # Distinct dtypes within WINDOW lines that make a table.

_DTYPES = _core.dtype_table()
_DTYPE_NAMES = {name for _, name, _, _ in _DTYPES}
_PROTO_TYPE_NAMES = {v.name: _DTYPES[v.number][1] for v in xdl_trace_pb2.Type.DESCRIPTOR.values}
# How a dtype is named in code: "float32", DType::kFloat32, np.float32, xdl::proto::Float,
# pb2.Float, DType.FLOAT32.
_DTYPE_MENTIONS = [
    (re.compile(r"[\"'](\w+)[\"']"), lambda g: g),
    (re.compile(r"\bDType::k(\w+)"), str.lower),
    (re.compile(r"\bnp\.([a-z0-9]+?)_?\b"), lambda g: g),
    (re.compile(r"(?:xdl::proto::|pb2\(?\)?\.)(\w+)"), lambda g: _PROTO_TYPE_NAMES.get(g)),
    (re.compile(r"\bDType\.([A-Z0-9]+)\b"), str.lower),
]


def _sources():
    """(relative path, text) of C++, bindings, the package and the shared test fixtures; test
    modules themselves are left out: they pin expected wire values on purpose."""
    roots = ["cpp", "bindings", "xdl_trace", "bench", "examples"]
    fixtures = [os.path.join("tests", "python", f) for f in ("conftest.py", "trace_file_maker.py")]
    paths = list(fixtures)
    for root in roots:
        for directory, _, files in os.walk(os.path.join(REPO, root)):
            for name in files:
                if name.endswith((".py", ".cc", ".h", ".c")) and not name.endswith("_pb2.py"):
                    paths.append(os.path.relpath(os.path.join(directory, name), REPO))
    for path in sorted(paths):
        with open(os.path.join(REPO, path), errors="replace") as f:
            yield path, f.read()


def dtype_table_lines(text):
    """The first line number of a window of WINDOW lines naming MIN_DTYPES distinct dtypes,
    or None."""
    per_line = []
    for line in text.splitlines():
        found = set()
        for pattern, to_name in _DTYPE_MENTIONS:
            for match in pattern.finditer(line):
                name = to_name(match.group(1))
                if name in _DTYPE_NAMES:
                    found.add(name)
        per_line.append(found)
    for start in range(len(per_line)):
        if len(set().union(*per_line[start : start + WINDOW])) >= MIN_DTYPES:
            return start + 1
    return None


def _enums():
    for fd in (xdl_trace_pb2.DESCRIPTOR, device_trace_pb2.DESCRIPTOR):
        yield from fd.enum_types_by_name.values()
        for message in fd.message_types_by_name.values():
            yield from message.enum_types


def enum_copies(text):
    """Names of proto enums of which `text` spells three or more value names as strings."""
    return [
        enum.full_name
        for enum in _enums()
        if sum(bool(re.search(rf"[\"']{v.name}[\"']", text)) for v in enum.values) >= 3
    ]


def test_the_scan_finds_a_planted_copy():
    """Positive control: a dtype table and a Type enum spelled by hand, as read_trace.py carried
    them before it read the descriptor set; the scan must see both, or it proves nothing about
    the other files."""
    planted = "DTYPES = [\n" + "".join(
        f'    ("{v.name}", np.{numpy}),\n'
        for v, (_, _, _, numpy) in zip(xdl_trace_pb2.Type.DESCRIPTOR.values, _DTYPES)
    )
    assert dtype_table_lines(planted + "]\n") is not None
    assert "xdl.proto.Type" in enum_copies(planted)
    assert dtype_table_lines(open(os.path.join(REPO, DTYPE_TABLE)).read()) is not None


def test_read_trace_takes_its_dtypes_from_the_descriptor_set():
    """The stand-alone reader holds no dtype table: its Type values and numpy types, derived
    from the build's descriptor set, are the C++ table's."""
    text = dict(_sources())[STANDALONE]
    assert dtype_table_lines(text) is None
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "read_trace_schema", os.path.join(REPO, STANDALONE)
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert [(v.name, v.number) for v in xdl_trace_pb2.Type.DESCRIPTOR.values] == [
        (name, number) for number, (name, _) in enumerate(script.DTYPES)
    ]
    assert [np.dtype(numpy) for _, _, _, numpy in _DTYPES] == [t for _, t in script.DTYPES]


def test_the_dtype_table_is_defined_once():
    found = {path: dtype_table_lines(text) for path, text in _sources()}
    copies = {
        f"{path}:{line}"
        for path, line in found.items()
        if line is not None and path not in PER_DTYPE_CODE | PENDING | {DTYPE_TABLE}
    }
    assert not copies, (
        f"a second dtype table at {sorted(copies)}: derive it from the one in {DTYPE_TABLE} "
        "(C++: GetDTypeInfo; Python: _core.dtype_table())"
    )
    stale = sorted(path for path in PENDING if found.get(path) is None)
    assert not stale, f"{stale} no longer list dtypes: remove them from PENDING"


def test_proto_enums_are_not_copied_by_hand():
    copies = {
        path: enum_copies(text)
        for path, text in _sources()
        if path != STANDALONE and enum_copies(text)
    }
    assert not copies, f"enum values spelled by hand (use the _pb2 constants): {copies}"


def test_python_builds_no_descriptors_and_spells_no_field_numbers():
    """The package takes messages and field numbers from xdl_trace._proto, and nothing in it
    imports the stand-alone tools/read_trace.py."""
    hand_built = re.compile(r"descriptor_pb2|FieldDescriptorProto|message_factory|MakeClass")
    field_literal = re.compile(r"^\s*\w*FIELD\w*\s*=\s*\d+", re.MULTILINE)
    imports_tool = re.compile(r"tools\.read_trace|from \.tools import|from \.\.? import read_trace")
    bad = []
    for path, text in _sources():
        if not path.startswith("xdl_trace") or path == STANDALONE or not path.endswith(".py"):
            continue
        for what, pattern in (
            ("builds a descriptor", hand_built),
            ("spells a field number", field_literal),
            ("imports tools/read_trace.py", imports_tool),
        ):
            if pattern.search(text):
                bad.append(f"{path} {what}")
    assert not bad, bad


def test_dtype_table_rows_match_the_proto_enum_and_numpy():
    values = sorted(v.number for v in xdl_trace_pb2.Type.DESCRIPTOR.values)
    assert [row[0] for row in _DTYPES] == values == list(range(len(values)))
    for value, name, itemsize, numpy in _DTYPES:
        assert np.dtype(numpy).itemsize == itemsize, name
        assert getattr(_core.DType, name.upper()).value == value


def _clear_json_names(messages):
    for message in messages:
        for field in message.field:
            field.ClearField("json_name")
        _clear_json_names(message.nested_type)


def test_shipped_pb2_modules_are_protoc_output_of_proto_dir(tmp_path):
    """The package's _pb2 modules describe proto/*.proto as it is now (a stale build fails)."""
    if shutil.which("protoc") is None:
        pytest.skip("SKIPPED: protoc not installed")
    from google.protobuf import descriptor_pb2

    for module in (xdl_trace_pb2, device_trace_pb2, xplane_pb2):
        name = module.DESCRIPTOR.name
        out = tmp_path / (name + ".pb")
        subprocess.run(
            [
                "protoc",
                "-I" + os.path.join(REPO, "proto"),
                "--descriptor_set_out=" + str(out),
                name,
            ],
            check=True,
            timeout=60,
        )
        expected = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]
        _clear_json_names(expected.message_type)  # protoc's Python output leaves them out.
        shipped = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
        assert shipped == expected, name
