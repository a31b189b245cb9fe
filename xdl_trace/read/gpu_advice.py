"""Advice on a run's GPU time: each line states a measured figure of the report's GPU section
(``report._gpu_sections``) and what usually cuts it. A line appears only when its figure passes
the threshold named beside it; docs/report.md lists them.

    advice = advise(section)              # [(share of the step, line)], in a fixed order
    for _, line in advice: print(line)
    headline = largest(advice)            # the line of the largest share of the step, or None
"""

import re

__all__ = [
    "advise",
    "largest",
    "HOST_WAIT_SHARE",
    "SHORT_KERNEL_SHARE",
    "OTHER_SHARE",
    "BUSY_SHARE",
    "LAYOUT_SHARE",
]

HOST_WAIT_SHARE = 0.01  # Host wait (after a sync, or not) over the step: >= 1% is worth a line.
OTHER_SHARE = 0.02  # Idle with queued work (HTA's "other") over the step.
SHORT_KERNEL_SHARE = 0.5  # Kernels under 10 us over all kernels.
BUSY_SHARE = 0.95  # GPU busy at or above it: the kernels themselves are the time.
COMM_EXPOSED_SHARE = 0.05  # Communication not hidden under compute, over the step.
STRAGGLER_SHARE = 0.05  # A rank's step this much longer than the median rank's.
LAYOUT_SHARE = 0.02  # Kernels converting between NCHW and NHWC, over the step.
# Those kernels, by name: cuDNN's transposes around a convolution it runs in NHWC (its tensor-core
# engines) on tensors that are NCHW, torch's default (cudnn::engines_precompiled::nchwToNhwcKernel).
_LAYOUT_KERNEL = re.compile(r"\w*(?:nchwToNhwc|nhwcToNchw)\w*", re.IGNORECASE)


def largest(advice):
    """The line of `advice` (``advise``'s) whose figure is the largest share of the step (one
    that says where time can be cut: "GPU busy" says only where it goes), or None: what the
    report's headline names."""
    return max(advice, key=lambda item: item[0])[1] if advice else None


def _ms(ns):
    return f"{ns / 1e6:.2f} ms"


def _pct(share):
    return f"{100 * share:.1f}%"


def advise(section):
    """The advice for one run's GPU section (a dict with per_step (ms figures in ns:
    ``gpu_steps.STEP_FIELDS`` averaged over the steps), launch, kernels, api and, with several
    ranks, ranks: ``report.gpu_section``): a list of (the share of the step the line's figure
    is, the line)."""
    p = section["per_step"]
    window = p.get("window") or 0.0
    if not window:
        return []
    lines = []
    after_sync = p["idle_blocking"]
    if after_sync / window >= HOST_WAIT_SHARE:
        calls = [a for a in section.get("api", ()) if a.get("blocking")]
        which = (
            f" ({', '.join(a['name'] for a in calls[:2])}: "
            f"{sum(a['blocking'] for a in calls[:2]) / max(section['steps'], 1):.0f} a step)"
            if calls
            else ""
        )
        lines.append(
            (
                after_sync / window,
                f"The GPU waits {_ms(after_sync)} a step ({_pct(after_sync / window)}) for the "
                f"host after a blocking CUDA call{which}: a value read on the host every step (a "
                "CUDA loss traced every step, .item()) stops the queue; trace it every N steps "
                "(filter=xdl.Every(10)) or copy it with non_blocking=True.",
            )
        )
    late = p["idle_host_wait"] - after_sync
    if late / window >= HOST_WAIT_SHARE:
        lines.append(
            (
                late / window,
                f"The GPU waits {_ms(late)} a step ({_pct(late / window)}) for the host to launch "
                "work (host-bound): fewer, larger ops (a larger batch, fused ops), CUDA graphs or "
                "torch.compile, or less host work between launches.",
            )
        )
    launch = section.get("launch") or {}
    short = launch.get("short_share")
    if short is not None and short >= SHORT_KERNEL_SHARE:
        lines.append(
            (
                p["idle_kernel_wait"] / window,
                f"{_pct(short)} of kernels run under 10 µs ({launch['short_kernels']} of "
                f"{launch['kernels']}); kernel wait {_ms(p['idle_kernel_wait'])} a step: CUDA "
                "graphs or torch.compile would cut launch cost.",
            )
        )
    if p["idle_other"] / window >= OTHER_SHARE:
        lines.append(
            (
                p["idle_other"] / window,
                f"{_ms(p['idle_other'])} a step ({_pct(p['idle_other'] / window)}) the GPU is idle "
                "with work queued behind a dependency (another stream, an event, a collective): "
                "look at the timeline around those gaps.",
            )
        )
    exposed = p["comm"] - p["comm_overlap"]
    if exposed / window >= COMM_EXPOSED_SHARE:
        lines.append(
            (
                exposed / window,
                f"Communication not overlapped with compute takes {_ms(exposed)} a step "
                f"({_pct(exposed / window)}): bucket gradients so all-reduce starts during the "
                "backward pass (DDP's bucket_cap_mb), or overlap with the next step's forward.",
            )
        )
    for straggler in section.get("stragglers", ()):
        if straggler["excess"] >= STRAGGLER_SHARE:
            lines.append(
                (
                    straggler["excess"],
                    f"Rank {straggler['rank']} is the slowest in {straggler['steps']} of "
                    f"{straggler['of']} steps, its GPU busy {_ms(straggler['busy'])} a step "
                    f"against {_ms(straggler['median_busy'])} for the median rank: the others "
                    "wait for it at each collective.",
                )
            )
    kernels = section.get("kernels") or []
    layout = [(_LAYOUT_KERNEL.search(k["name"]), k) for k in kernels]
    layout = [(m.group(0), k) for m, k in layout if m]
    share = sum(k["share"] or 0 for _, k in layout)
    if share >= LAYOUT_SHARE:
        names = ", ".join(dict.fromkeys(name for name, _ in layout))
        lines.append(
            (
                share,
                f"Layout conversions between NCHW and NHWC ({names}) take {_ms(share * window)} a "
                f"step ({_pct(share)}): cuDNN runs these convolutions in NHWC; the model and its "
                "input in channels_last (model.to(memory_format=torch.channels_last), the same for "
                "the input batch) would spare them.",
            )
        )
    busy = p["busy"] / window
    if busy >= BUSY_SHARE and kernels:
        top = kernels[0]
        name = top["name"][:80] + ("…" if len(top["name"]) > 80 else "")
        lines.append(
            (
                0.0,  # No time to cut: what the time is spent in.
                f"The GPU is busy {_pct(busy)} of the step: the time is in the kernels "
                f"themselves; the top one, {name}, takes {_pct(top['share'] or 0)} of the step.",
            )
        )
    return lines
