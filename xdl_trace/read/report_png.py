"""The report's charts as PNG files: the chart specs of a report model (``build_report``) drawn
with matplotlib (Agg), one file per chart, as the HTML page draws them with uPlot."""

import math
import os
import re

import numpy as np

__all__ = ["render_pngs"]

LEGEND_INSIDE = 8  # Series named in a legend over the plot, at most; more go beside it,
LEGEND_ROWS = 14  # in columns of this many,
LEGEND_MOST = 3 * LEGEND_ROWS  # up to this many; past it (a sweep of 200 runs) none, said.


def _slug(text):
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")[:60] or "chart"


def _css_color(color):
    """A uPlot colour ('#rrggbb' or 'rgba(r,g,b,a)') as a matplotlib RGBA tuple."""
    if color.startswith("#"):
        return tuple(int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)) + (1.0,)
    r, g, b, a = (float(v) for v in color[color.index("(") + 1 : -1].split(","))
    return (r / 255, g / 255, b / 255, a)


def render_pngs(model, directory, dpi=100):
    """Draws every chart of the model with matplotlib (Agg) into `directory`; returns the paths."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    # Key, run and series names are text: "$\frac$" is not mathtext to parse (issue 24 #12).
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        return _draw(plt, model, directory, dpi)


def _draw(plt, model, directory, dpi):
    from matplotlib.ticker import FuncFormatter

    number = FuncFormatter(lambda value, _position: f"{value:g}")
    charts = [("steps", spec) for spec in model["steps"]]
    charts += [("steps", spec) for spec in model.get("gpu_charts", ())]
    charts += [(card["key"], spec) for card in model["cards"] for spec in card["charts"]]
    charts += [("steps", spec) for spec in model.get("difference_charts", ())]
    charts += [("steps", spec) for spec in model.get("sweep", {}).get("charts", ())]
    paths = []
    for n, (key, spec) in enumerate(charts):
        fig, ax = plt.subplots(figsize=(8, 3.2), dpi=dpi)
        x = np.asarray(spec["x"], dtype=np.float64)

        def column(i):
            return np.array([np.nan if v is None else v for v in spec["series"][i]["values"]])

        for band in spec["bands"]:
            hi, lo = column(band["hi"]), column(band["lo"])
            ok = np.isfinite(hi) & np.isfinite(lo)
            ax.fill_between(x[ok], lo[ok], hi[ok], color=_css_color(band["fill"]), linewidth=0)
        labelled = set()
        for i, s in enumerate(spec["series"]):
            name = re.sub(r" (mean|min|max)$", "", s["label"])
            if s.get("draw") is False:  # A stacked band's own values: its legend entry only.
                if s.get("legend"):
                    ax.plot([], [], color=_css_color(s["color"]), linewidth=6, label=name)
                    labelled.add(name)
                continue
            if s.get("points") and not s["width"]:  # A sweep's run: its one point.
                y = column(i)
                ok = np.isfinite(y)
                ax.plot(x[ok], y[ok], "o", color=_css_color(s["color"]), markersize=4)
                continue
            if not s["width"]:
                continue
            y = column(i)
            # A gap (a NaN/Inf value) breaks the line; a gstep without a point is spanned.
            ok = np.isfinite(y)
            ok[s.get("gaps", [])] = True
            ax.plot(
                x[ok],
                y[ok],
                color=_css_color(s["color"]),
                linewidth=s["width"],
                linestyle=(0, tuple(s["dash"])) if s["dash"] else "-",
                label=None if name in labelled else name,
            )
            labelled.add(name)
        for gstep in spec.get("marks", ()):  # The evaluations, on the step-time chart.
            ax.axvline(gstep, color="#5a5a5a", alpha=0.55, linewidth=0.8, linestyle=(0, (3, 3)))
        # Log axes label their ticks as numbers ("1e+32"): matplotlib's own labels are
        # mathtext, which parse_math=False (above) prints as "$\mathdefault{10^{32}}$".
        if spec["log"]:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(number)
        if spec.get("xlog"):
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(number)
        if spec.get("xnames"):  # A category's values at 0, 1, ...
            ax.set_xticks(range(len(spec["xnames"])), spec["xnames"])
            ax.set_xlim(-0.5, len(spec["xnames"]) - 0.5)
        title = spec["title"] if key == "steps" else f"{key}: {spec['title']}"
        named = len(labelled) <= LEGEND_MOST
        ax.set_title(
            title if named else f"{title} ({len(labelled)} series: the HTML report names them)",
            fontsize=10,
            loc="left",
        )
        ax.set_xlabel(spec["xlabel"], fontsize=9)
        ax.set_ylabel(spec["ylabel"], fontsize=9)
        ax.grid(True, color="#e6e9ef", linewidth=0.8)
        ax.tick_params(labelsize=8)
        # A sweep's runs: beside the plot, never over it.
        if named and len(labelled) > LEGEND_INSIDE:
            columns = math.ceil(len(labelled) / LEGEND_ROWS)
            fig.set_size_inches(8 + 1.9 * columns, 3.2)
            ax.legend(
                fontsize=7, frameon=False, ncol=columns, loc="upper left", bbox_to_anchor=(1.01, 1)
            )
        elif named and len(labelled) > 1:
            ax.legend(fontsize=8, frameon=False, ncol=min(len(labelled), 4))
        fig.tight_layout()
        path = os.path.join(directory, f"{n:03d}_{_slug(title)}.png")
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths
