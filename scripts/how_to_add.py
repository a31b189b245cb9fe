#!/usr/bin/env python3
"""Proves docs/design.md "How to add": adds a Meta field, a dtype, two device event kinds (one
that is device work) and a config key, each in its own scratch copy of the tree, editing only the
places listed there, builds, and checks that the new thing flows through.

    python3 scripts/how_to_add.py [--only meta,dtype,device_event_kind,device_work_kind,config_key]
                                  [--keep]
    make how-to-add

Each scratch copy is the checkout's tracked and new files under build/how-to-add/<item>, built in
its own build/ folder with the checkout's CMake flags (ccache, when present, makes the unchanged
sources hits). Prints the places each item edited and PASS or FAIL; exits non-zero on a FAIL.
Not part of `make test`: it builds the core five times.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRATCH = os.path.join(REPO, "build", "how-to-add")
PYTHON = os.environ.get("PYTHON", sys.executable)
JOBS = os.environ.get("JOBS", "2")


def next_field_number(proto, message):
    """One past the highest field number (or reserved number) of `message` in `proto`: the
    number a new field takes, as the .proto's author would pick it."""
    with open(os.path.join(REPO, proto)) as f:
        text = f.read()
    start = text.index(f"message {message} {{")
    body = text[start : text.index("\n}\n", start)]
    body = re.sub(r"//[^\n]*", "", body)
    numbers = [int(n) for n in re.findall(r"=\s*(\d+)\s*[;\[]", body)]
    for reserved in re.findall(r"reserved\s+([^;]+);", body):
        numbers += [int(n) for n in re.findall(r"\d+", reserved)]
    return max(numbers) + 1


# The Meta field the "meta" item adds: the next free number (Meta grows; a fixed one collides).
META_PROBE_NUMBER = next_field_number("proto/xdl_trace.proto", "Meta")

# Each item: the places it edits, as (path, anchor, text, where) with where "after" or "before"
# the anchor (which must occur once), the targets to build and the check to run in the copy.
ITEMS = {
    "meta": {
        "what": "a Meta field (how_to_add_probe, written as 42)",
        "edits": [
            (
                "proto/xdl_trace.proto",
                "  fixed32 meta_crc32c = 17;",
                f"  int64 how_to_add_probe = {META_PROBE_NUMBER};  // how_to_add.py's probe.\n",
                "before",
            ),
            (
                "cpp/src/io/data_file_segment.cc",
                "  meta.set_closed_cleanly(closed_cleanly);\n",
                "  meta.set_how_to_add_probe(42);\n",
                "after",
            ),
        ],
        "targets": ["_core"],
        "check": """
            import os, subprocess, sys, tempfile
            import numpy as np
            import xdl_trace as xdl
            from xdl_trace import _core
            out = tempfile.mkdtemp()
            xdl.trace_tensor("x", np.arange(3.0))
            with xdl.TraceHook({"output_dir": out}) as hook:
                hook.step()
            data = os.path.join(out, "train.trace.0.1")
            meta = _core.read_meta(data + ".meta")
            assert meta["how_to_add_probe"] == 42, meta
            script = os.path.join("xdl_trace", "tools", "read_trace.py")
            printed = subprocess.run([sys.executable, script, data], capture_output=True,
                                     text=True, check=True).stdout
            assert "how_to_add_probe=42" in printed, printed
            print("Meta dict and read_trace.py both show how_to_add_probe=42")
        """,
    },
    "dtype": {
        "what": "a dtype (Complex64, numpy complex64, no built-in summary)",
        "edits": [
            ("proto/xdl_trace.proto", "  BFloat16 = 13;\n", "  Complex64 = 14;\n", "after"),
            (
                "cpp/include/xdl_trace/dtype.h",
                "  kBFloat16 = 13,\n};\n\ninline constexpr int32_t kNumDTypes = 14;",
                "  kBFloat16 = 13,\n  kComplex64 = 14,\n};\n\ninline constexpr int32_t kNumDTypes = 15;",
                "replace",
            ),
            (
                "cpp/src/core/dtype.cc",
                '    {xdl::proto::BFloat16, {DType::kBFloat16, "bfloat16", 2, "uint16", K::kBFloat16}},\n',
                '    {xdl::proto::Complex64, {DType::kComplex64, "complex64", 8, "complex64", K::kOpaque}},\n',
                "after",
            ),
        ],
        "targets": ["_core"],
        "check": """
            import os, subprocess, sys, tempfile
            import numpy as np
            import xdl_trace as xdl
            from xdl_trace import _core
            out = tempfile.mkdtemp()
            value = np.array([1 + 2j, -3.5j], np.complex64)
            xdl.trace_tensor("z", value)
            with xdl.TraceHook({"output_dir": out}) as hook:
                hook.step()
            assert ("complex64", 8, "complex64") in [row[1:] for row in _core.dtype_table()]
            back = xdl.open_trace(out).stack("z")
            assert back.dtype == np.complex64 and np.array_equal(back[0], value), back
            data = os.path.join(out, "train.trace.0.1")
            script = os.path.join("xdl_trace", "tools", "read_trace.py")
            printed = subprocess.run([sys.executable, script, data], capture_output=True,
                                     text=True, check=True).stdout
            assert "z Complex64[2]: [ 1.+2.j  -0.-3.5j]" in printed, printed
            try:
                xdl.trace_tensor("zs", value, summary="stats")
                with xdl.TraceHook({"output_dir": tempfile.mkdtemp(), "on_error": "raise"}) as h:
                    h.step()
                raise AssertionError("a stats summary of complex64 was accepted")
            except ValueError as error:
                assert "complex64 has no built-in summary" in str(error), error
            print("complex64 round-trips through numpy write/read and read_trace.py; "
                  "its stats summary is refused naming it")
        """,
    },
    "device_event_kind": {
        "what": "a device event kind (DEVICE_EVENT_HOW_TO_ADD_PROBE, category 'probe')",
        "edits": [
            (
                "proto/device_trace.proto",
                "  DEVICE_EVENT_MEMORY = 10;",
                "  DEVICE_EVENT_HOW_TO_ADD_PROBE = 11;  // how_to_add.py's probe.\n",
                "before",
            ),
            (
                "cpp/src/core/device_trace_fields.h",
                "  X(kMemory, MEMORY, 10)\n",
                "  X(kMemory, MEMORY, 10) \\\n  X(kHowToAddProbe, HOW_TO_ADD_PROBE, 11)\n",
                "replace",
            ),
            (
                "xdl_trace/read/device_events.py",
                '    device_trace_pb2.DEVICE_EVENT_MEMORY: ("memory", OTHER),',
                '    device_trace_pb2.DEVICE_EVENT_HOW_TO_ADD_PROBE: ("probe", OTHER),\n',
                "before",
            ),
        ],
        # wire_test static_asserts every row of the kind table against the generated enum.
        "targets": ["_core", "wire_test"],
        "check": """
            import os, sys, tempfile
            sys.path.insert(0, os.path.join("tests", "python"))
            import trace_file_maker as tm
            from xdl_trace.read import timeline
            from xdl_trace._proto import device_trace_pb2 as dt
            out = tempfile.mkdtemp()
            records = list(tm.device_records(2, 2))
            for record in records:
                for device in record.device_trace[0].device:
                    for line in device.line:
                        for event in line.event:
                            if event.kind == dt.DEVICE_EVENT_KERNEL:
                                event.kind = dt.DEVICE_EVENT_HOW_TO_ADD_PROBE
            tm.write_file(os.path.join(out, "train.trace.0.1"), [], records)
            events = timeline.build_timeline(out)["traceEvents"]
            probes = [e for e in events if e.get("cat") == "probe"]
            assert len(probes) == 4, [e.get("cat") for e in events]
            assert dt.DeviceEventKind.Name(11) == "DEVICE_EVENT_HOW_TO_ADD_PROBE"
            print(f"{len(probes)} events of the new kind in the timeline as category 'probe'; "
                  "wire_test built (its static_asserts cover the new row)")
        """,
    },
    "device_work_kind": {
        "what": "a device event kind that is device work (DEVICE_EVENT_HOW_TO_ADD_WORK, role WORK)",
        "edits": [
            (
                "proto/device_trace.proto",
                "  DEVICE_EVENT_MEMORY = 10;",
                "  DEVICE_EVENT_HOW_TO_ADD_WORK = 11;  // how_to_add.py's probe.\n",
                "before",
            ),
            (
                "cpp/src/core/device_trace_fields.h",
                "  X(kMemory, MEMORY, 10)\n",
                "  X(kMemory, MEMORY, 10) \\\n  X(kHowToAddWork, HOW_TO_ADD_WORK, 11)\n",
                "replace",
            ),
            (
                "xdl_trace/read/device_events.py",
                '    device_trace_pb2.DEVICE_EVENT_MEMORY: ("memory", OTHER),',
                '    device_trace_pb2.DEVICE_EVENT_HOW_TO_ADD_WORK: ("probe_work", WORK),\n',
                "before",
            ),
        ],
        "targets": ["_core", "wire_test"],
        # Every kernel of a constructed run becomes the new kind: the timeline's step and launch
        # flows reach it and the GPU summary counts its time as busy, as it did the kernels'.
        "check": """
            import os, sys, tempfile
            sys.path.insert(0, os.path.join("tests", "python"))
            import trace_file_maker as tm
            from xdl_trace.read import analysis, timeline
            from xdl_trace._proto import device_trace_pb2 as dt

            def run(kind):
                out = tempfile.mkdtemp()
                records = list(tm.device_records(3, 4))
                for record in records:
                    for device in record.device_trace[0].device:
                        for line in device.line:
                            for event in line.event:
                                if event.kind == dt.DEVICE_EVENT_KERNEL:
                                    event.kind = kind
                tm.write_file(os.path.join(out, "train.trace.0.1"), [], records)
                return timeline.build_timeline(out), analysis.scan_run(out).gpu

            (kernels, kernel_gpu), (probes, probe_gpu) = (
                run(dt.DEVICE_EVENT_KERNEL), run(dt.DEVICE_EVENT_HOW_TO_ADD_WORK))
            work = [e for e in probes["traceEvents"] if e.get("cat") == "probe_work"]
            assert len(work) == 12, len(work)
            flows = probes["otherData"]["flows"]
            assert flows == kernels["otherData"]["flows"] == 24, flows
            busy = probe_gpu["totals"]["busy"]
            assert busy == kernel_gpu["totals"]["busy"] > 0, (busy, kernel_gpu["totals"])
            assert probe_gpu["totals"]["compute"] == busy
            print(f"{len(work)} events of the new kind, {flows} flows (step and launch) as for "
                  f"kernels; GPU busy {busy / 1e6:.2f} ms as the kernels'; wire_test built")
        """,
    },
    "config_key": {
        "what": "a config key (how_to_add_probe_s, a number >= 0, default 1.5)",
        "edits": [
            (
                "cpp/include/xdl_trace/config.h",
                "  std::string device_plugin_config;\n",
                "  double how_to_add_probe_s = 1.5;  // how_to_add.py's probe.\n",
                "after",
            ),
            (
                "cpp/src/core/config.cc",
                '      {"device_plugin_config", &C::device_plugin_config},\n',
                '      {"how_to_add_probe_s", &C::how_to_add_probe_s, Range::kNonNegative},\n',
                "after",
            ),
            (
                "docs/python.md",
                '| `device_plugin_config` | `""` |',
                "| `how_to_add_probe_s` | 1.5 | how_to_add.py's probe |\n",
                "before",
            ),
        ],
        "targets": ["_core"],
        "check": """
            import tempfile
            import numpy as np
            import xdl_trace as xdl
            assert "how_to_add_probe_s" in xdl.CONFIG_KEYS
            out = tempfile.mkdtemp()
            assert xdl.TraceHook({"output_dir": out})._config.how_to_add_probe_s == 1.5
            for bad in (-1, float("nan"), "soon"):
                try:
                    xdl.TraceHook({"output_dir": out, "how_to_add_probe_s": bad})
                    raise AssertionError(f"{bad!r} was accepted")
                except ValueError as error:
                    assert "'how_to_add_probe_s'" in str(error), error
            xdl.trace_tensor("x", np.arange(3.0))
            with xdl.TraceHook({"output_dir": out, "how_to_add_probe_s": 2.5}) as hook:
                hook.step()
                stored = hook._tracer.config.how_to_add_probe_s
            assert stored == 2.5, stored
            print("accepted (2.5 in the running tracer's config), default 1.5, and -1, nan, "
                  "'soon' refused naming the key")
        """,
    },
}


def copy_tree(dest):
    """The checkout's tracked and new (not ignored) files, as they are now, copied to `dest`."""
    if os.path.exists(dest):
        shutil.rmtree(dest)
    os.makedirs(dest)
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for name in files:
        source = os.path.join(REPO, os.fsdecode(name))
        if name and os.path.isfile(source) and not os.path.islink(source):
            target = os.path.join(dest, os.fsdecode(name))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(source, target)


def apply_edit(tree, path, anchor, text, where):
    full = os.path.join(tree, path)
    with open(full) as f:
        content = f.read()
    if content.count(anchor) != 1:
        raise RuntimeError(f"{path}: the anchor {anchor!r} occurs {content.count(anchor)} times")
    replacement = {"after": anchor + text, "before": text + anchor, "replace": text}[where]
    with open(full, "w") as f:
        f.write(content.replace(anchor, replacement))


def cmake_flags():
    flags = ["-DCMAKE_BUILD_TYPE=RelWithDebInfo", f"-DPython_EXECUTABLE={PYTHON}"]
    if shutil.which("ccache"):
        flags += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
    return flags


def run_item(name, item, log):
    tree = os.path.join(SCRATCH, name)
    copy_tree(tree)
    for edit in item["edits"]:
        apply_edit(tree, *edit)
    env = dict(os.environ, CCACHE_BASEDIR=os.environ.get("CCACHE_BASEDIR", os.path.dirname(REPO)))
    build = os.path.join(tree, "build")
    steps = [
        ["cmake", "-S", tree, "-B", build] + cmake_flags(),
        ["nice", "cmake", "--build", build, "-j", JOBS, "--target"] + item["targets"],
        [PYTHON, "-c", textwrap.dedent(item["check"])],
    ]
    for step in steps:
        result = subprocess.run(step, cwd=tree, env=env, capture_output=True, text=True)
        log.write(f"$ {' '.join(step[:8])}\n{result.stdout}{result.stderr}\n")
        if result.returncode != 0:
            return False, (result.stdout + result.stderr).strip().splitlines()[-15:]
    return True, result.stdout.strip().splitlines()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="comma-separated items (default all): " + ",".join(ITEMS))
    parser.add_argument("--keep", action="store_true", help="keep the scratch copies")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(ITEMS)
    os.makedirs(SCRATCH, exist_ok=True)
    failed = []
    for name in names:
        item = ITEMS[name]
        places = sorted({path for path, *_ in item["edits"]})
        print(f"== {name}: {item['what']}")
        print(f"   places edited ({len(places)}): {', '.join(places)}")
        with open(os.path.join(SCRATCH, name + ".log"), "w") as log:
            try:
                ok, lines = run_item(name, item, log)
            except Exception as error:  # An anchor gone: the docs' list is out of date.
                ok, lines = False, [f"{type(error).__name__}: {error}"]
        for line in lines:
            print(f"   {line}")
        print(f"   {'PASS' if ok else 'FAIL'} (log: {os.path.relpath(log.name, REPO)})")
        if not ok:
            failed.append(name)
        elif not args.keep:
            shutil.rmtree(os.path.join(SCRATCH, name))
    print("how-to-add: " + (f"FAIL: {', '.join(failed)}" if failed else "PASS"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
