#!/usr/bin/env python3
"""Plots of a precision report (dsv4-verify precision-report --json): PNG and SVG.

    plot_precision_report.py REPORT.json --out DIR     writes DIR/{recall_vs_position,stage_nmse,
                                                        error_distribution,
                                                        output_error_vs_position}.{png,svg}
    plot_precision_report.py --check                   exits 0 when matplotlib imports

Every figure of a report over several seeds is the mean over seeds with its 95% interval (a band, or
error bars); error distributions are pooled over seeds. Every figure is drawn into a temporary
folder beside DIR and then moved into DIR file by file, so a plot is whole or absent. The functions
are also used by the notebooks in notebooks_export/.
"""
import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import textwrap

# The stages whose error distributions are drawn: the indexer's scores (the layer's kv where it has
# no indexer), the attention output and the layer output.
DISTRIBUTION_STAGES = ("indexer/scores", "attn/core", "out")
# Line styles cycle with the colours, so that policies whose curves coincide stay distinguishable.
LINESTYLES = ("-", "--", "-.", ":")
FIGURES = ("recall_vs_position", "stage_nmse", "error_distribution", "output_error_vs_position")
FORMAT_VERSION = 2


def number(v):
    """A JSON number of the report ("nan", "inf", "-inf" stand for the non-finite ones)."""
    return float(v) if isinstance(v, str) else v


def mean(figure):
    """The mean over seeds of a figure {"mean", "low", "high", "values"}."""
    return number(figure["mean"])


def bounds(figure):
    """(low, high) of a figure's 95% interval, or None without one (one seed)."""
    if figure["low"] is None or figure["high"] is None:
        return None
    return number(figure["low"]), number(figure["high"])


def seed_count(report):
    return max(1, len(report["input"].get("seeds", [])))


def load(path):
    with open(path) as f:
        report = json.load(f)
    if report.get("format") != "dsv4-precision-report":
        raise ValueError(f"{path}: not a precision report (format {report.get('format')!r})")
    if report.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: precision report format version {report.get('format_version')!r}, "
                         f"this script reads version {FORMAT_VERSION}")
    return report


def compared(report):
    """The policies other than the reference (whose errors are zero by definition)."""
    return [p for p in report["policies"] if p["name"] != report["reference"]]


def layer_indices(report):
    return list(range(len(report["policies"][0]["layers"]))) if report["policies"] else []


def input_caption(report):
    i = report["input"]
    source = f"capture {i['file']}" if i["kind"] == "capture" else "synthetic inputs"
    model = i.get("activation_model")
    if model and not model["description"].startswith("x ~ N(0, 1)"):
        source += " (a model of activations with outliers, not a capture)"
    spread = f"; mean over {seed_count(report)} seeds with 95% intervals" if seed_count(report) > 1 else ""
    return f"{source}, {i['weights']} weights{spread}: {i['description']}"


def distribution_stages(report, layer):
    names = [s["stage"] for s in report["policies"][0]["layers"][layer]["stages"]]
    return [s if s in names else "kv" for s in DISTRIBUTION_STAGES]


def style(i):
    return LINESTYLES[i % len(LINESTYLES)]


def line_with_band(ax, xs, figures, i, label, log=False, **kwargs):
    """The means as a line and, where the report has intervals, the 95% band around them (on a log
    axis the band's low end stays above zero)."""
    ys = [mean(f) for f in figures]
    if log:
        ys = [y if y > 0 else math.nan for y in ys]
    (line,) = ax.plot(xs, ys, linestyle=style(i), label=label, **kwargs)
    spans = [bounds(f) for f in figures]
    if all(s is not None for s in spans) and spans:
        lows = [s[0] for s in spans]
        highs = [s[1] for s in spans]
        if log:
            lows = [lo if lo > 0 else y / 10 for lo, y in zip(lows, ys)]
        ax.fill_between(xs, lows, highs, color=line.get_color(), alpha=0.15, linewidth=0)
    return line


def plot_recall_vs_position(report, ax, layer):
    """Mean top-k recall against query position (bucket midpoints), one line per policy, with its
    95% band over seeds."""
    for i, p in enumerate(compared(report)):
        recall = p["layers"][layer]["end_to_end"]["topk_recall"]
        if recall is None:
            continue
        xs = [(b["first_position"] + b["last_position"]) / 2 for b in recall["by_position"]]
        line_with_band(ax, xs, [b["mean"] for b in recall["by_position"]], i, p["name"], marker=".")
    first = report["policies"][0]["layers"][layer]
    ax.set_title(f"layer {first['layer']} (ratio {first['compress_ratio']}): top-k recall vs exact")
    ax.set_xlabel("query position (context length)")
    ax.set_ylabel("mean recall")
    ax.grid(True, alpha=0.3)


def plot_output_error_vs_position(report, ax, layer, key="layer_nmse"):
    """NMSE of the layer output (key "layer_nmse") or the attention output ("attention_nmse") of the
    query rows of each position bucket, one line per policy, with its 95% band over seeds."""
    for i, p in enumerate(compared(report)):
        buckets = p["layers"][layer]["end_to_end"]["output_by_position"]
        xs = [(b["first_position"] + b["last_position"]) / 2 for b in buckets]
        line_with_band(ax, xs, [b[key] for b in buckets], i, p["name"], log=True, marker=".")
    first = report["policies"][0]["layers"][layer]
    what = "layer output (out)" if key == "layer_nmse" else "attention output (attn/core)"
    ax.set_yscale("log")
    ax.set_title(f"layer {first['layer']} (ratio {first['compress_ratio']}): {what} NMSE vs exact")
    ax.set_xlabel("query position (context length)")
    ax.set_ylabel("NMSE of the bucket's rows")
    ax.grid(True, alpha=0.3)


def plot_stage_nmse(report, ax, layer):
    """NMSE against exact for every stage, one line per policy (log scale; zeros left out), with
    95% error bars over seeds."""
    stages = [s["stage"] for s in report["policies"][0]["layers"][layer]["stages"]]
    for i, p in enumerate(compared(report)):
        figures = [s["nmse"] for s in p["layers"][layer]["stages"]]
        ys = [mean(f) if mean(f) > 0 else math.nan for f in figures]
        spans = [bounds(f) for f in figures]
        yerr = None
        if all(s is not None for s in spans):
            yerr = [[y - max(s[0], y / 10) if y == y else 0 for y, s in zip(ys, spans)],
                    [s[1] - y if y == y else 0 for y, s in zip(ys, spans)]]
        ax.errorbar(range(len(stages)), ys, yerr=yerr, marker="o", markersize=3, capsize=2, linestyle=style(i),
                    label=p["name"])
    ax.set_yscale("log")
    ax.set_xticks(range(len(stages)))
    ax.set_xticklabels(stages, rotation=60, ha="right", fontsize=7)
    first = report["policies"][0]["layers"][layer]
    ax.set_title(f"layer {first['layer']} (ratio {first['compress_ratio']}): NMSE per stage")
    ax.set_ylabel("NMSE vs exact")
    ax.grid(True, alpha=0.3)


def plot_error_distribution(report, ax, layer, stage):
    """Fraction of elements per bin of log10(|policy - exact| / RMS of the exact token row), pooled
    over seeds."""
    h = report["error_histogram"]
    centres = [h["low"] + (i + 0.5) * h["step"] for i in range(h["bins"])]
    for i, p in enumerate(compared(report)):
        found = [s for s in p["layers"][layer]["stages"] if s["stage"] == stage]
        if not found:
            continue
        counts = found[0]["histogram"]["counts"]
        total = max(1, found[0]["n_finite"])
        ax.plot(centres, [c / total for c in counts], linestyle=style(i), label=p["name"])
    ax.set_title(f"layer {report['policies'][0]['layers'][layer]['layer']}: {stage}", fontsize=9)
    ax.set_xlabel("log10(|error| / token RMS)")
    ax.set_ylabel("fraction of elements")
    ax.grid(True, alpha=0.3)


def outside_legend(ax):
    """The legend to the right of the axes, where it hides no line (reports have up to ~20 policies)."""
    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))


def caption(fig, report):
    """The input (kind, source, weights, shape) above the figure, wrapped to its width."""
    lines = textwrap.wrap(input_caption(report), int(fig.get_figwidth() * 16))
    fig.suptitle("\n".join(lines), fontsize=7)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.11 * len(lines) / fig.get_figheight()))


def figures(report):
    """(name, matplotlib figure) for each plot of the report."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = layer_indices(report)
    csa = [l for l in layers if report["policies"][0]["layers"][l]["end_to_end"]["topk_recall"] is not None]
    out = []

    fig, axes = plt.subplots(1, max(1, len(csa)), figsize=(max(9, 6 * len(csa) + 2), 4.5), squeeze=False)
    for ax, l in zip(axes[0], csa):
        plot_recall_vs_position(report, ax, l)
    if not csa:
        axes[0][0].text(0.5, 0.5, "no CSA layer: no indexer, no recall", ha="center", va="center")
        axes[0][0].set_axis_off()
    else:
        outside_legend(axes[0][-1])
    caption(fig, report)
    out.append(("recall_vs_position", fig))

    fig, axes = plt.subplots(1, len(layers), figsize=(max(9, 6 * len(layers) + 2), 6), squeeze=False)
    for ax, l in zip(axes[0], layers):
        plot_stage_nmse(report, ax, l)
    outside_legend(axes[0][-1])
    caption(fig, report)
    out.append(("stage_nmse", fig))

    fig, axes = plt.subplots(len(layers), len(DISTRIBUTION_STAGES), figsize=(13, 1 + 3.2 * len(layers)), squeeze=False)
    for row, l in zip(axes, layers):
        for ax, stage in zip(row, distribution_stages(report, l)):
            plot_error_distribution(report, ax, l, stage)
    axes[0][-1].legend(fontsize=6)
    caption(fig, report)
    out.append(("error_distribution", fig))

    fig, axes = plt.subplots(1, len(layers), figsize=(max(9, 6 * len(layers) + 2), 4.5), squeeze=False)
    for ax, l in zip(axes[0], layers):
        plot_output_error_vs_position(report, ax, l)
    outside_legend(axes[0][-1])
    caption(fig, report)
    out.append(("output_error_vs_position", fig))
    return out


def write_plots(report, out_dir):
    """Every figure as PNG and SVG into out_dir, each file whole or absent."""
    import matplotlib.pyplot as plt

    out_dir = os.path.abspath(out_dir)
    parent = os.path.dirname(out_dir)
    temp = tempfile.mkdtemp(prefix=".plots-", dir=parent)
    try:
        names = []
        for name, fig in figures(report):
            for ext in ("png", "svg"):
                path = os.path.join(temp, f"{name}.{ext}")
                # No date in the metadata and a fixed SVG id salt: the same report gives the same files.
                if ext == "png":
                    fig.savefig(path, dpi=90, metadata={"Software": None})
                else:
                    plt.rcParams["svg.hashsalt"] = "dsv4-precision-report"
                    fig.savefig(path, metadata={"Date": None})
                names.append(f"{name}.{ext}")
            plt.close(fig)
        os.makedirs(out_dir, exist_ok=True)
        for n in names:
            os.replace(os.path.join(temp, n), os.path.join(out_dir, n))
        return [os.path.join(out_dir, n) for n in names]
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", nargs="?", help="the JSON report")
    parser.add_argument("--out", help="folder for the PNG and SVG files")
    parser.add_argument("--check", action="store_true", help="only check that matplotlib imports")
    args = parser.parse_args(argv)
    if args.check:
        import matplotlib  # noqa: F401  (the check is the import)

        return 0
    if not args.report or not args.out:
        parser.error("expected REPORT and --out DIR (or --check)")
    try:
        written = write_plots(load(args.report), args.out)
    except (OSError, ValueError, KeyError) as e:
        print(f"plot_precision_report: {e}", file=sys.stderr)
        return 1
    for w in written:
        print(w)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
