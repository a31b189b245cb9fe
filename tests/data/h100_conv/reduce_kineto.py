"""Writes kineto_reduced.json.gz from the full torch.profiler trace of the H100 run: kernels (name,
ts, dur, correlation, and their launch configuration as Kineto reports it), CUDA runtime/driver
calls and the STEP annotations, the fields the tests read; and kineto_launches.tsv, each distinct
launch configuration with Kineto's blocks per SM and est. achieved occupancy % (read by the C++
occupancy test, which has no JSON reader).

    /usr/bin/python3 tests/data/h100_conv/reduce_kineto.py ../shared/gpu/h100-conv-2026-11-26
"""

import gzip
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCH_ARGS = (
    "grid",
    "block",
    "registers per thread",
    "shared memory",
    "est. achieved occupancy %",
    "blocks per SM",
    "warps per SM",
)


def reduce(full):
    for e in full["traceEvents"]:
        cat = e.get("cat")
        if cat == "user_annotation" and e["name"].startswith("STEP "):
            yield {"cat": cat, "name": e["name"], "ts": e["ts"], "dur": e["dur"]}
        elif cat in ("kernel", "cuda_runtime", "cuda_driver"):
            out = {
                "cat": cat,
                "name": e["name"],
                "ts": e["ts"],
                "dur": e["dur"],
                "correlation": e["args"]["correlation"],
            }
            if cat == "kernel":
                out["args"] = {k: e["args"][k] for k in LAUNCH_ARGS if k in e["args"]}
            yield out


def main(source):
    with gzip.open(os.path.join(source, "kineto_trace.json.gz")) as f:
        full = json.load(f)
    reduced = {
        "source": f"kineto_trace.json.gz of {source} (torch.profiler, the same loop): kernel, "
        "CUDA runtime/driver and STEP annotation events, fields the tests use",
        "traceEvents": list(reduce(full)),
        "deviceProperties": full.get("deviceProperties", []),
    }
    with gzip.GzipFile(os.path.join(HERE, "kineto_reduced.json.gz"), "wb", mtime=0) as f:
        f.write(json.dumps(reduced).encode())
    launches = set()
    for e in reduced["traceEvents"]:
        if e["cat"] == "kernel":
            a = e["args"]
            launches.add(
                (
                    "x".join(map(str, a["grid"])),
                    "x".join(map(str, a["block"])),
                    a["registers per thread"],
                    a["shared memory"],
                    a["blocks per SM"],
                    a["est. achieved occupancy %"],
                )
            )
    with open(os.path.join(HERE, "kineto_launches.tsv"), "w", encoding="ascii") as f:
        f.write("grid\tblock\tregisters\tshared_memory\tblocks_per_sm\test_occupancy_pct\n")
        for row in sorted(launches):
            f.write("\t".join(map(str, row)) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
