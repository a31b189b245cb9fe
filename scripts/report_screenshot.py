"""Remakes docs/report.png: two 2-rank runs of the quick-start MLP (one whose learning rate keeps
rising until its gradients explode), overlaid in one report, rendered by headless Chromium; with
--gpu, docs/report_gpu.png: the GPU section of the report of the H100 trace in tests/data/h100_conv
(cropped with Pillow to the section, 256 colours).

    /usr/bin/python3 scripts/report_screenshot.py [--out docs/report.png] [--keep DIR]
    /usr/bin/python3 scripts/report_screenshot.py --gpu

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
sys.path.insert(0, os.path.join(ROOT, "examples"))
import xdl_trace as xdl  # noqa: E402
from quickstart import gradients, register  # noqa: E402
from xdl_trace.read.report import write_report  # noqa: E402


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
    register(params, state)
    config = {"output_dir": out_dir, "rank": rank, "fsync": False}
    with xdl.TraceHook(config, filter=xdl.Every(2)) as hook:
        for step in range(steps):
            lr = 0.05 * (1.0115**step if rising else 1.0)
            grads = gradients(x, y, params, state)
            for name, g in grads.items():
                xdl.send_gradient(name, g)
            hook.step(gstep=step)
            for name, g in grads.items():
                params[name] -= np.float32(lr) * g
    xdl.clear()


def chromium(base, *args):
    """Runs headless Chromium on `args`; SystemExit on a console error or a failure."""
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
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    console = [l for l in render.stderr.splitlines() if "CONSOLE" in l or "Uncaught" in l]
    if render.returncode != 0 or console:
        raise SystemExit(f"chromium failed: {render.returncode}\n" + "\n".join(console))
    return render.stdout


# Puts the page offsets of the GPU section and of the Keys heading into the title.
_PROBE = (
    "<script>window.addEventListener('load',function(){var h=document.querySelectorAll('h2');"
    "var keys=[].filter.call(h,function(e){return /^Keys/.test(e.textContent);})[0];"
    "document.title='SPAN:'+document.getElementById('gpu').offsetTop+':'+keys.offsetTop;});"
    "</script>"
)


def gpu_shot(out):
    """docs/report_gpu.png: the GPU section of the H100 trace's report."""
    from PIL import Image

    base = os.path.join(tempfile.gettempdir(), "xdl_report_gpu_shot")
    os.makedirs(base, exist_ok=True)
    try:
        page = os.path.join(base, "report.html")
        write_report(os.path.join(ROOT, "tests", "data", "h100_conv", "cupti_trace"), page)
        probe = os.path.join(base, "probe.html")
        with open(page, encoding="utf-8") as f, open(probe, "w", encoding="utf-8") as g:
            g.write(f.read().replace("</body>", _PROBE + "</body>"))
        dom = chromium(base, "--window-size=1400,2800", "--dump-dom", "file://" + probe)
        top, bottom = (int(v) for v in dom.split("<title>SPAN:")[1].split("<")[0].split(":"))
        shot = os.path.join(base, "full.png")
        chromium(base, f"--screenshot={shot}", "--window-size=1400,2800", "file://" + page)
        image = Image.open(shot).convert("RGB").crop((0, top - 8, 1400, bottom - 8))
        image.quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(out, optimize=True)
        print(f"wrote {out} from {page} (rows {top}..{bottom})")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="default: docs/report.png (docs/report_gpu.png with --gpu)")
    parser.add_argument("--keep", help="write the runs and report.html here and keep them")
    parser.add_argument("--gpu", action="store_true", help="the GPU section of the H100 trace")
    args = parser.parse_args()
    if args.gpu:
        gpu_shot(args.out or os.path.join(ROOT, "docs", "report_gpu.png"))
        return
    args.out = args.out or os.path.join(ROOT, "docs", "report.png")
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
        chromium(base, f"--screenshot={args.out}", "--window-size=1280,1500", "file://" + page)
        print(f"wrote {args.out} from {page}")
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
