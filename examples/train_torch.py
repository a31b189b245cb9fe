"""PyTorch MLP traced with xdl_trace: parameters, gradients (.grad after backward), loss and an
activation. Finishes in a few seconds on a CPU.

    /usr/bin/python3 examples/train_torch.py [OUT_DIR] [--steps N]
"""

import argparse
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import xdl_trace as xdl  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", default=None, help="trace directory (default: temp)")
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args(argv)
    out_dir = args.out_dir or tempfile.mkdtemp(prefix="xdl_torch_")

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 1),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(512, 16)
    y = (x[:, :4].sum(dim=1, keepdim=True) ** 2) / 4

    # Parameters are registered in place (the optimizer updates them in place); gradients
    # are read from .grad at each traced step; loss and activation through callbacks.
    names = xdl.trace_collection(model)
    for name in names:
        xdl.trace_gradient(name, summary="stats")
    captured = {}
    model[1].register_forward_hook(lambda module, inp, out: captured.__setitem__("act", out))
    xdl.trace_callback("loss", lambda: captured["loss"])
    xdl.trace_tensor("act1", lambda: captured["act"].detach(), summary="histogram")

    with xdl.TraceHook({"output_dir": out_dir}, filter=xdl.Every(10)) as hook:
        for step in range(args.steps):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            captured["loss"] = loss.detach()
            hook.step(gstep=step)  # After backward, before the update.
            opt.step()
    stats = hook.stats()
    print(
        f"traced {stats['steps_traced']} of {stats['steps_seen']} steps, "
        f"{stats['records_written']} records, {stats['bytes_written']} bytes in {out_dir}"
    )
    trace = xdl.open_trace(out_dir)
    gsteps, losses = trace.stack("loss", return_gsteps=True)
    print("loss:", ", ".join(f"{g}:{float(v):.4f}" for g, v in zip(gsteps, losses)))
    print("keys:", ", ".join(trace.keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
