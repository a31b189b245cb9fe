"""The [gpu] check of device tracing: runs the CUDA example and asserts the joins, not just counts.

    python3 examples/cuda/check_joins.py EXAMPLE_BINARY OUTPUT_DIR

Exit 77 (ctest: skipped) where the example finds no GPU. Otherwise, from the timeline of the
example's run: every kernel lies inside the host span of the step it is tagged with; every
kernel and copy has a flow from its launching API call and one from its step; the copies moved
exactly the bytes the example copied (n floats each way, host memory pageable); the device's
limits arrived (from the driver: the example starts CUDA before the tracer, so CUPTI writes no
DEVICE record) and every kernel has an occupancy from them.
"""

import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

STEPS = 20  # examples/cuda/train_cuda.cc
N = 1 << 16
EPS_US = 0.002  # Timeline rounding (ns -> us, 3 decimals).


def main(binary, output_dir):
    shutil.rmtree(output_dir, ignore_errors=True)
    run = subprocess.run([binary, output_dir], capture_output=True, text=True, timeout=300)
    print(run.stdout, end="")
    if run.returncode != 0:
        print(run.stderr, end="", file=sys.stderr)
        return run.returncode  # 77: no GPU, reported as skipped.
    from xdl_trace.read import timeline

    events = timeline.build_timeline(output_dir)["traceEvents"]
    steps = {
        e["args"]["correlation_id"]: e
        for e in events
        if e["ph"] == "X" and e["cat"] == "host" and e["name"].startswith("step ")
    }
    kernels = [e for e in events if e["ph"] == "X" and e["cat"] == "kernel"]
    copies = [e for e in events if e["ph"] == "X" and e["cat"] == "memcpy"]
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)

    for name in ("Axpy", "Scale"):
        n = sum(1 for k in kernels if name in k["name"])
        check(n == STEPS, f"{n} {name} kernels, expected {STEPS}")
    for k in kernels:
        step = steps.get(k["args"].get("step_correlation_id"))
        check(step is not None, f"kernel {k['name']} at {k['ts']} has no step")
        if step is not None:
            inside = step["ts"] - EPS_US <= k["ts"] and (
                k["ts"] + k["dur"] <= step["ts"] + step["dur"] + EPS_US
            )
            check(inside, f"kernel at {k['ts']} outside its step {step['name']}")
            check(k["args"].get("gstep") == step["args"]["gstep"], "kernel gstep")
    for kind, memory in (
        ("HtoD", ("src_memory", "pageable")),
        ("DtoH", ("dst_memory", "pageable")),
    ):
        mine = [c for c in copies if c["args"].get("copy_kind") == kind]
        check(len(mine) == STEPS, f"{len(mine)} {kind} copies, expected {STEPS}")
        for c in mine:
            check(c["args"].get("bytes") == N * 4, f"{kind} of {c['args'].get('bytes')} bytes")
            check(c["args"].get(memory[0]) == memory[1], f"{kind} {memory[0]}")
    from xdl_trace.read import analysis

    scan = analysis.scan_run(output_dir)
    devices = scan.device_events.columns()["devices"]
    check(
        bool(devices) and all(d["stats"].get("sm_count", 0) > 0 for d in devices),
        f"no device limits (the driver's, or CUPTI's DEVICE record): {devices}",
    )
    for k in scan.gpu["kernels"] if scan.gpu else []:
        occupancy = k["occupancy"]
        check(occupancy is not None and 0 < occupancy <= 1, f"{k['name']}: occupancy {occupancy}")
    # Flow ends ("f") sit on the kernel/copy they point to.
    ends = {}
    for e in events:
        if e["ph"] == "f":
            ends.setdefault((e["cat"], e["pid"], e["tid"], e["ts"]), 0)
            ends[(e["cat"], e["pid"], e["tid"], e["ts"])] += 1
    starts = {e["id"] for e in events if e["ph"] == "s"}
    check(all(e["id"] in starts for e in events if e["ph"] == "f"), "a flow end without a start")
    for work in kernels + copies:
        where = (work["pid"], work["tid"], work["ts"])
        check(("launch",) + where in ends, f"{work['name']} at {work['ts']}: no launch flow")
        check(("step",) + where in ends, f"{work['name']} at {work['ts']}: no step flow")
    for failure in failures[:20]:
        print("FAILED:", failure)
    print(
        f"joins: {len(kernels)} kernels, {len(copies)} copies, {len(steps)} steps;"
        f" {len(failures)} failures"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
