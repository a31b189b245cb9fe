"""scripts/how_to_add.py (`make how-to-add`, docs/design.md "How to add") without its builds: every
place an item edits is still where the script looks (each anchor once in the tree), and the Meta
field it adds takes a number Meta does not use yet."""

import importlib.util
import os
import re

import pytest

from conftest import REPO
from xdl_trace._proto import xdl_trace_pb2

_spec = importlib.util.spec_from_file_location(
    "how_to_add", os.path.join(REPO, "scripts", "how_to_add.py")
)
how_to_add = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(how_to_add)

EDITS = [
    (name, path, anchor)
    for name, item in how_to_add.ITEMS.items()
    for path, anchor, _text, _where in item["edits"]
]


@pytest.mark.parametrize("name,path,anchor", EDITS, ids=[f"{e[0]}:{e[1]}" for e in EDITS])
def test_each_listed_place_is_where_the_script_edits(name, path, anchor):
    with open(os.path.join(REPO, path)) as f:
        assert f.read().count(anchor) == 1, f"{name}: {path} should hold {anchor!r} once"


def test_the_meta_probe_takes_the_next_free_field_number():
    (path, _anchor, text, _where) = how_to_add.ITEMS["meta"]["edits"][0]
    assert path == "proto/xdl_trace.proto"
    number = int(re.search(r"= (\d+);", text).group(1))
    used = {field.number for field in xdl_trace_pb2.Meta.DESCRIPTOR.fields}
    assert number not in used, f"Meta field {number} is taken: {sorted(used)}"
    assert number == max(used) + 1
