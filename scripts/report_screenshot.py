"""Remakes docs/report.png: two 2-rank runs of the quick-start MLP (one whose learning rate keeps
rising until its gradients explode), overlaid in one report, rendered by headless Chromium.

    /usr/bin/python3 scripts/report_screenshot.py [--out docs/report.png] [--keep DIR]

Fails when Chromium prints a console error or exits non-zero.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import xdl_trace as xdl  # noqa: E402
from xdl_trace.report import write_report  # noqa: E402


def train(out_dir, rank, rising, steps=300):
    """The quick-start's MLP (examples/quickstart.py) on rank `rank`, every 2nd step traced;
    with `rising` the learning rate grows 1.15% per step from 0.05 (to 1.5 at the end)."""
    xdl.clear()
    rng = np.random.default_rng(rank)
    x = rng.normal(size=(256, 2)).astype(np.float32)
    y = (np.sin(x[:, :1]) + x[:, 1:] ** 2).astype(np.float32)
    init = np.random.default_rng(0)
    params = {
        "w1": (init.normal(size=(2, 32)) * 0.5).astype(np.float32),
        "b1": np.zeros(32, np.float32),
        "w2": (init.normal(size=(32, 1)) * 0.2).astype(np.float32),
        "b2": np.zeros(1, np.float32),
    }
    state = {"loss": np.float32(0), "hidden": np.zeros((256, 32), np.float32)}
    xdl.trace_collection(params)
    for name in params:
        xdl.trace_gradient(name)
    xdl.trace_callback("loss", lambda: state["loss"])
    xdl.trace_tensor("hidden", lambda: state["hidden"], summary="histogram")
    config = {"output_dir": out_dir, "rank": rank, "fsync": False}
    with xdl.TraceHook(config, filter=xdl.Every(2)) as hook:
        for step in range(steps):
            lr = 0.05 * (1.0115**step if rising else 1.0)
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
            for name, g in grads.items():
                xdl.send_gradient(name, g)
            hook.step(gstep=step)
            for name, g in grads.items():
                params[name] -= np.float32(lr) * g
    xdl.clear()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "report.png"))
    parser.add_argument("--keep", help="write the runs and report.html here and keep them")
    args = parser.parse_args()
    # A fixed path: the RUNS table shows it.
    base = args.keep or os.path.join(tempfile.gettempdir(), "xdl_report_shot")
    os.makedirs(base, exist_ok=True)
    try:
        runs = [os.path.join(base, "runs", "lr_0.05"), os.path.join(base, "runs", "lr_rising")]
        for run, rising in zip(runs, (False, True)):
            shutil.rmtree(run, ignore_errors=True)
            for rank in (0, 1):
                train(run, rank, rising)
        page = os.path.join(base, "report.html")
        write_report(runs, page, keys="loss,w1,gradient/b2")
        browser = shutil.which("chromium") or shutil.which("chromium-browser")
        if browser is None:
            raise SystemExit("chromium is not installed (scripts/setup.sh installs it)")
        render = subprocess.run(
            [
                browser,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--hide-scrollbars",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={os.path.join(base, 'profile')}",
                "--enable-logging=stderr",
                "--v=0",
                f"--screenshot={args.out}",
                "--window-size=1280,1500",
                "file://" + page,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        console = [l for l in render.stderr.splitlines() if "CONSOLE" in l or "Uncaught" in l]
        if render.returncode != 0 or console:
            raise SystemExit(f"chromium failed: {render.returncode}\n" + "\n".join(console))
        print(f"wrote {args.out} from {page}")
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
