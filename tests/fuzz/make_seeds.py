"""Writes the fuzzers' seed corpus (tests/fuzz/corpus/): files from the real writer and torn copies.

    /usr/bin/python3 tests/fuzz/make_seeds.py   # needs the built extension (make build)

A reader seed is a data file, followed by reader_fuzz.cc's separator and the Meta when it has
one; a meta seed is the Meta alone. Besides files written by xdl_trace's own writer, it writes
an XDL-style file (Meta fields 1-6, -1 markers) with tests/python/trace_file_maker.py.
"""

import os
import shutil
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
import xdl_trace as xdl  # noqa: E402
import trace_file_maker as tm  # noqa: E402
from xdl_trace.tools import read_trace  # noqa: E402

SEPARATOR = b"\0--xdl-fuzz-meta--\0"


def written_by_xdl_trace(out_dir):
    """Four traced steps of a few dtypes and shapes, a trace_once key and an empty column."""
    xdl.clear()
    state = {"step": 0}
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    ids = np.arange(5, dtype=np.int64)
    xdl.trace_variable("w", w)
    xdl.trace_tensor("ids", ids)
    xdl.trace_tensor("mask", np.array([True, False]))
    xdl.trace_tensor("half", np.array([1.5, -2], np.float16))
    xdl.trace_tensor("none", np.zeros(0, np.float32))
    xdl.trace_callback("loss", lambda: np.float64(1.0 / (1 + state["step"])))
    xdl.trace_once("config", np.array([0.1, 4], np.float64))
    with xdl.TraceHook({"output_dir": out_dir}) as hook:
        for step in range(4):
            state["step"] = step
            w += 1
            ids *= 2
            hook.step()
    xdl.clear()
    (data_file,) = [f for f in os.listdir(out_dir) if not f.endswith(".meta")]
    return os.path.join(out_dir, data_file)


def main():
    work = tempfile.mkdtemp(prefix="xdl_trace_seeds_")
    try:
        path = written_by_xdl_trace(work)
        data = open(path, "rb").read()
        meta = open(path + ".meta", "rb").read()
        # As XDL's trace.py writes: Meta fields 1-6 only, lstep from 1.
        records = tm.simple_records(range(1, 4))
        xdl_data = tm.write_file(os.path.join(work, "xdl.trace.0.0"), ["w", "loss"], records, False)
        xdl_meta = (
            tm.pb2()
            .Meta(
                lstep_begin=1,
                lstep_end=3,
                gstep_begin=1,
                gstep_end=3,
                timestamp_begin=records[0].timestamp,
                timestamp_end=records[-1].timestamp,
            )
            .SerializeToString()
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    header_end = 4 + int.from_bytes(data[:4], "little")
    second = header_end + 4 + int.from_bytes(data[header_end : header_end + 4], "little")
    assert tm.pb2().Meta.FromString(meta).HasField("header_crc32c")  # Field 18, checked at open.

    def flipped(content, offset, mask):
        damaged = bytearray(content)
        damaged[offset] ^= mask
        return bytes(damaged)

    # The damage of issue 37, one bit each: a Header key, the Header's length prefix, a record's
    # Record.crc32c tag (field 16 -> 17, a record "without checksum"), the Meta's own checksum
    # tag (17 -> 16), and a frame that claims more bytes than the file has.
    format_number = tm.pb2().Meta.DESCRIPTOR.fields_by_name["format_version"].number
    (format_tag,) = [f[5] for f in read_trace._fields(meta, 0, len(meta)) if f[0] == format_number]
    reader_seeds = {
        "valid_with_meta": data + SEPARATOR + meta,
        "valid_no_meta": data,
        "xdl_style": xdl_data + SEPARATOR + xdl_meta,
        "empty": b"",
        "header_only": data[:header_end],
        "torn_in_header": data[: header_end // 2],
        "torn_in_prefix": data[: header_end + 2] + SEPARATOR + meta,
        "torn_in_record": data[: (header_end + second) // 2],
        "torn_last_record": data[:-3] + SEPARATOR + meta,
        "zero_tail": data + bytes(64) + SEPARATOR + meta,
        "meta_covers_less": data + SEPARATOR + meta[: len(meta) // 2],
        "header_key_flipped": flipped(data, data.index(b"ids") + 2, 0x01) + SEPARATOR + meta,
        "header_length_flipped": flipped(data, 3, 0x01) + SEPARATOR + meta,
        "record_crc_tag_flipped": flipped(data, second - 6, 0x08) + SEPARATOR + meta,
        "meta_crc_tag_flipped": data + SEPARATOR + flipped(meta, len(meta) - 6, 0x08),
        "frame_longer_than_file": data + b"\xf0\xff\xff\xff\x08\x01" + SEPARATOR + meta,
    }
    meta_seeds = {
        "xdl_trace": meta,
        "xdl_style": xdl_meta,
        "empty": b"",
        "crc_tag_flipped": flipped(meta, len(meta) - 6, 0x08),
        "format_version_tag_flipped": flipped(flipped(meta, len(meta) - 6, 0x08), format_tag, 0x08),
    }
    for corpus, seeds in (("reader", reader_seeds), ("meta", meta_seeds)):
        out = os.path.join(HERE, "corpus", corpus)
        os.makedirs(out, exist_ok=True)
        for name, content in seeds.items():
            with open(os.path.join(out, name), "wb") as f:
                f.write(content)
        print(f"{out}: {len(seeds)} seeds")


if __name__ == "__main__":
    main()
