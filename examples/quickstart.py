"""Quick start: train a small numpy MLP, trace it with xdl_trace, then read the trace back.

    /usr/bin/python3 examples/quickstart.py [OUT_DIR] [--steps N]

Traces every variable in place, their gradients (delivered with send_gradient), the loss
(a callback), a histogram of the hidden activation, and the run's config once; every 5th
step is traced; ends by writing OUT_DIR/report.html. Finishes in a few seconds.
"""

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import xdl_trace as xdl  # noqa: E402


def gradients(x, y, params, state):
    """One forward and backward pass of the MLP: the loss and the hidden activation go into
    `state` (where the traced callbacks read them); the gradients are returned."""
    h = np.maximum(x @ params["w1"] + params["b1"], 0)
    pred = h @ params["w2"] + params["b2"]
    err = pred - y
    state["loss"] = np.float32((err**2).mean())
    state["hidden"] = h
    d_pred = 2 * err / len(x)
    grads = {"w2": h.T @ d_pred, "b2": d_pred.sum(0)}
    d_h = (d_pred @ params["w2"].T) * (h > 0)
    grads["w1"] = x.T @ d_h
    grads["b1"] = d_h.sum(0)
    return grads


def register(params, state):
    """What to trace. Arrays are registered once and read in place at each traced step, so the
    training code updates them in place (p -= lr * g)."""
    xdl.trace_collection(params)
    for name in params:
        xdl.trace_gradient(name)
    xdl.trace_callback("loss", lambda: state["loss"])
    xdl.trace_tensor("hidden", lambda: state["hidden"], summary="histogram")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", default=None, help="trace directory (default: temp)")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args(argv)
    out_dir = args.out_dir or tempfile.mkdtemp(prefix="xdl_quickstart_")

    # A two-layer MLP regressing y = sin(x0) + x1^2 on random inputs.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 2)).astype(np.float32)
    y = (np.sin(x[:, :1]) + x[:, 1:] ** 2).astype(np.float32)
    params = {
        "w1": (rng.normal(size=(2, 32)) * 0.5).astype(np.float32),
        "b1": np.zeros(32, np.float32),
        "w2": (rng.normal(size=(32, 1)) * 0.2).astype(np.float32),
        "b2": np.zeros(1, np.float32),
    }
    state = {"loss": np.float32(0), "hidden": np.zeros((256, 32), np.float32)}
    lr = 0.05

    register(params, state)
    xdl.trace_once("config", np.array([lr, args.steps], np.float64))

    config = {"output_dir": out_dir, "max_file_m_size": 1}
    with xdl.TraceHook(config, filter=xdl.Every(5)) as hook:
        for step in range(args.steps):
            grads = gradients(x, y, params, state)
            for name, g in grads.items():
                xdl.send_gradient(name, g)
            hook.step(gstep=step)
            for name, g in grads.items():
                params[name] -= lr * g
    stats = hook.stats()
    print(
        f"traced {stats['steps_traced']} of {stats['steps_seen']} steps: "
        f"{stats['records_written']} records, {stats['bytes_written']} bytes, "
        f"{stats['files_written']} file(s) in {out_dir}"
    )

    # What the reader sees.
    trace = xdl.open_trace(out_dir)
    print(f"ranks {trace.ranks}, files {[os.path.basename(f.path) for f in trace.files]}")
    for key, (dtype, shape) in trace.schema().items():
        print(f"  {key:12s} {dtype:8s} {list(shape)}")
    gsteps, losses = trace.stack("loss", return_gsteps=True)
    print(
        "loss by gstep:",
        ", ".join(f"{g}:{float(v):.4f}" for g, v in list(zip(gsteps, losses))[::8]),
    )
    last = None
    for last in trace.records(keys=["w2", "gradient/w2"]):
        pass
    print(
        f"last record: gstep {last.gstep}, |w2| {np.linalg.norm(last['w2']):.4f}, "
        f"|grad w2| {np.linalg.norm(last['gradient/w2']):.4f}"
    )
    print("verify:", "ok" if all(r["ok"] for r in trace.verify()) else "FAILED")

    # Something to look at: curves, distributions and alerts in one self-contained HTML page
    # (the same as `xdl-trace report OUT_DIR -o OUT_DIR/report.html`).
    from xdl_trace.read.report import write_report

    page = write_report(out_dir, os.path.join(out_dir, "report.html"))
    print(f"report: {page['output']} ({page['charts']} charts; open it in a browser)")
    cli = f"{sys.executable} -m xdl_trace"
    print(f"\nfiles: {out_dir}/train.trace.<rank>.<index> (+ .meta). Next:")
    for line in (
        f"{cli} info {out_dir}",
        f"{cli} dump {out_dir} --keys loss --max-records 5",
        f"{cli} find-nan {out_dir}",
        f"{cli} timeline {out_dir} -o {out_dir}/timeline.json   # open in ui.perfetto.dev",
    ):
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
