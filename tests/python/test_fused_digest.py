"""The device digest pass (_device_summary.digest_rows) and its fused kernel (_FUSED_MIX), proved
without a GPU: the pass gives the host's digests by torch's ops and by the kernel's source,
compiled for the host by the C++ compiler and run as jiterator runs it on CUDA (inputs promoted
to int64, (rows, 1) and (1, tile) operands broadcast); the proof a device makes before using the
kernel accepts it and refuses a wrong or failing one, which leaves the digests to torch's ops.
On a GPU (`-m gpu`) the real jiterator kernel is proved and used."""

import ctypes
import shutil
import subprocess
import warnings

import numpy as np
import pytest
import torch

from xdl_trace import _core
from xdl_trace.write import _device, _device_summary

HARNESS = """
#include <cstdint>
%s
// The elementwise loop jiterator generates, over bits (rows, tile) with the (rows, 1) and
// (1, tile) operands broadcast.
extern "C" void run(const int64_t* bits, const int64_t* row_start, const int64_t* row_length,
                    const int64_t* column, int64_t rows, int64_t tile, long long mask,
                    int64_t* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < tile; ++c)
      out[r * tile + c] = xdl_digest_mix<int64_t>(bits[r * tile + c], row_start[r],
                                                  row_length[r], column[c], mask);
}
"""


def _compiled(source, directory):
    """`source` (a jiterator functor) compiled for the host into `directory`, as a mix: the
    same signature as _device_summary.torch_mix."""
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    directory.mkdir()
    library = directory / "mix.so"
    cpp = directory / "mix.cc"
    cpp.write_text(HARNESS % source)
    subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-o", library, cpp], check=True)
    run = ctypes.CDLL(str(library)).run
    pointer = np.ctypeslib.ndpointer(dtype=np.int64, flags="C_CONTIGUOUS")
    run.argtypes = [pointer] * 4 + [ctypes.c_int64, ctypes.c_int64, ctypes.c_longlong, pointer]

    def mix(bits, row_start, row_length, column, mask):
        rows, tile = bits.shape
        promoted = bits.to(torch.int64).contiguous().numpy()  # As TensorIterator promotes.
        out = np.empty((rows, tile), np.int64)
        inputs = [t.reshape(-1).contiguous().numpy() for t in (row_start, row_length, column)]
        run(promoted, *inputs, rows, tile, mask, out)
        return torch.from_numpy(out)

    return mix


def _tensors():
    g = torch.Generator().manual_seed(1)
    return [
        torch.randn(5000, generator=g),  # Several rows of TILE, a padded last row.
        torch.randn(3, generator=g),
        torch.zeros(0),
        torch.tensor([float("nan"), -0.0, float("inf")]),
        torch.randn(64, 33, generator=g).t(),  # Not contiguous.
        torch.randn(100, generator=g).double(),
        torch.randn(100, generator=g).half(),
        torch.randn(2049, generator=g).bfloat16(),
        torch.randint(-128, 127, (300,), generator=g, dtype=torch.int8),
        torch.randint(0, 255, (31,), generator=g, dtype=torch.uint8),
        torch.randint(-(2**15), 2**15 - 1, (77,), generator=g, dtype=torch.int16),
        torch.randint(-(2**31), 2**31 - 1, (300,), generator=g, dtype=torch.int32),
        torch.randint(-(2**62), 2**62, (70,), generator=g, dtype=torch.int64),
        torch.rand(77, generator=g) > 0.5,
        torch.randn(4097, generator=g),
    ]


def _host_digest(t):
    host = t.contiguous()
    if host.dtype == torch.bfloat16:
        host = host.view(torch.int16)
    return _core.digest(host.numpy(), _device.wire_dtype(t))


def _digests(rows):
    return [(int(high) << 32) | int(low) for high, low in rows.tolist()]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return _compiled(_device_summary._FUSED_MIX, tmp_path_factory.mktemp("fused") / "kernel")


@pytest.mark.parametrize("mix", ["torch ops", "fused kernel"])
def test_the_digest_pass_gives_the_host_s_digests(mix, compiled):
    """The pass (rows of the device layout, padding left out) equals the host's digest bit for
    bit, for every element size and across row boundaries, by either mix."""
    mix = compiled if mix == "fused kernel" else _device_summary.torch_mix
    tensors = _tensors()
    want = [_host_digest(t) for t in tensors]
    rows = _device_summary.digest_rows(tensors, mix=mix)
    assert rows.shape == (len(tensors), 2) and rows.dtype == torch.float64
    assert _digests(rows) == want
    # Passes of at most 100 elements: every tensor alone, rows of its own size.
    assert _digests(_device_summary.digest_rows(tensors, chunk=100, mix=mix)) == want


def test_the_proof_accepts_the_kernel_and_refuses_a_wrong_or_failing_one(compiled, tmp_path):
    cpu = torch.device("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Accepted: nothing said.
        assert _device_summary.prove_mix(cpu, lambda: compiled) is compiled
    # One shift off (29 for 30): every probe's digest differs.
    wrong = _compiled(_device_summary._FUSED_MIX.replace(">> 30", ">> 29"), tmp_path / "wrong")
    with pytest.warns(RuntimeWarning, match="fused digest kernel is off on cpu") as said:
        why = _device_summary.prove_mix(cpu, lambda: wrong)
    assert "torch.int32, torch.int8, torch.uint8, torch.int16, torch.int64 probe tensors" in why
    assert "are not the host's" in str(said[0].message)

    # A kernel that ignores the mask: int16 and int32 bits (read as such) are sign-extended by
    # the promotion; a byte is read as uint8, 8 bytes as int64: those two agree.
    unmasked = _compiled(
        _device_summary._FUSED_MIX.replace("& (unsigned long long)mask", ""), tmp_path / "unmasked"
    )
    with pytest.warns(RuntimeWarning):
        why = _device_summary.prove_mix(cpu, lambda: unmasked)
    assert "of torch.int32, torch.int16 probe tensors" in why

    def no_nvrtc():
        raise RuntimeError("nvrtc: error: failed to open libnvrtc-builtins.so")

    with pytest.warns(RuntimeWarning, match="RuntimeError: nvrtc: error: failed to open"):
        assert _device_summary.prove_mix(cpu, no_nvrtc) == (
            "RuntimeError: nvrtc: error: failed to open libnvrtc-builtins.so"
        )


def test_the_proof_s_wait_has_a_bound():
    """A probe that never completes (a hung device) ends the wait at its bound: the proof then
    refuses the kernel (any failure does, above) and the step goes on."""
    with pytest.raises(TimeoutError, match="the probe did not complete within 0.05 s"):
        _device_summary._wait(lambda: False, 0.05)
    _device_summary._wait(iter([False, False, True]).__next__, 5)  # Done on the third poll.


def test_jiterator_finds_the_kernel_s_name():
    """jiterator reads the functor's name with a regular expression that a '>' could derail."""
    from torch.cuda.jiterator import _CodeParser

    parsed = _CodeParser(_device_summary._FUSED_MIX)
    assert parsed.function_name == "xdl_digest_mix"
    assert parsed.function_params.count(",") == 4


def test_no_fused_kernel_off_cuda_nor_when_turned_off(monkeypatch):
    assert _device_summary._fused_mix(torch.device("cpu")) is None
    monkeypatch.setenv("XDL_TRACE_FUSED_DIGEST", "0")
    assert _device_summary._fused_mix(torch.device("cuda", 0)) is None


@pytest.mark.gpu
def test_the_jiterator_kernel_is_proved_and_used_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    device = torch.device("cuda", 0)
    tensors = [t.to(device) for t in _tensors()]
    rows = _device_summary.digest_rows(tensors)
    assert _device_summary.fused_digest_status() == {str(device): "on"}
    assert _device.graph_stats()["summary_fused_digest"] == {str(device): "on"}  # hook.stats()
    assert _digests(rows.cpu()) == [_host_digest(t) for t in _tensors()]
