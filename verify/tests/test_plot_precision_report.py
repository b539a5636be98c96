#!/usr/bin/env python3
"""scripts/plot_precision_report.py through dsv4-verify precision-report --plots: PNG and SVG files
for a small report, each whole or absent when plotting fails part-way, and no report written when
the plots fail.

    test_plot_precision_report.py DSV4_VERIFY PLOT_SCRIPT
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

FIGURES = ("recall_vs_position", "stage_nmse", "error_distribution", "output_error_vs_position")


def load_script(path):
    spec = importlib.util.spec_from_file_location("plot_precision_report", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def report(verify, out, *extra, env=None):
    cmd = [verify, "precision-report", "--synth", "tiny", "--prefill", "48", "--batch", "1", "--seeds", "2",
           "--policies", "exact,official,bf16", "--json", os.path.join(out, "r.json"), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def check_plots(verify, tmp):
    plots = os.path.join(tmp, "plots")
    r = report(verify, tmp, "--plots", plots)
    assert r.returncode == 0, r.stderr
    for name in FIGURES:
        with open(os.path.join(plots, name + ".png"), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", name
        root = ET.parse(os.path.join(plots, name + ".svg")).getroot()
        assert root.tag.endswith("svg"), name
    assert sorted(os.listdir(plots)) == sorted(f"{n}.{e}" for n in FIGURES for e in ("png", "svg"))
    assert not [n for n in os.listdir(tmp) if n.startswith(".plots-")], os.listdir(tmp)
    with open(os.path.join(tmp, "r.json")) as f:
        assert json.load(f)["policies"][1]["name"] == "official"


def check_bands(script, tmp):
    """Over two seeds every policy's recall and output-error line has its 95% band; the stage NMSE has
    error bars from the report's intervals. A one-seed report has no interval, so no band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    module = load_script(script)
    rep = module.load(os.path.join(tmp, "r.json"))
    compared = module.compared(rep)
    for draw in (module.plot_recall_vs_position, module.plot_output_error_vs_position):
        fig, ax = plt.subplots()
        draw(rep, ax, 0)
        bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
        assert len(bands) == len(compared), (draw.__name__, len(bands))
        plt.close(fig)
    fig, ax = plt.subplots()
    module.plot_stage_nmse(rep, ax, 0)
    official = compared[0]["layers"][0]["stages"][0]["nmse"]
    assert ax.containers and ax.containers[0].has_yerr, "no error bars"
    segment = ax.containers[0].lines[2][0].get_segments()[0]  # the first stage's bar of the first policy
    assert abs(segment[1][1] - module.number(official["high"])) < 1e-12 * abs(module.number(official["high"]))
    plt.close(fig)

    one = json.loads(json.dumps(rep))
    for p in one["policies"]:
        for b in p["layers"][0]["end_to_end"]["topk_recall"]["by_position"]:
            b["mean"]["low"] = b["mean"]["high"] = None
    fig, ax = plt.subplots()
    module.plot_recall_vs_position(one, ax, 0)
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]
    plt.close(fig)


def check_failure_part_way(script, tmp):
    """A figure that fails after another was drawn: no plot reaches the folder, no temporary stays."""
    module = load_script(script)
    rep = module.load(os.path.join(tmp, "r.json"))
    drawn = module.figures

    def failing(report):
        first = drawn(report)[0]
        yield first
        raise OSError("injected failure after the first figure")

    module.figures = failing
    out = os.path.join(tmp, "partial")
    try:
        module.write_plots(rep, out)
        raise AssertionError("the injected failure did not propagate")
    except OSError:
        pass
    assert not os.path.exists(out) or os.listdir(out) == [], os.listdir(out)
    assert not [n for n in os.listdir(tmp) if n.startswith(".plots-")], os.listdir(tmp)


def check_no_report_when_plots_fail(verify, tmp):
    failing = os.path.join(tmp, "failing_plot.py")
    with open(failing, "w") as f:
        f.write("import sys\nsys.exit(0 if '--check' in sys.argv else 3)\n")
    out = os.path.join(tmp, "second")
    os.mkdir(out)
    env = dict(os.environ, DSV4_PLOT_SCRIPT=failing)
    r = report(verify, out, "--markdown", os.path.join(out, "r.md"), "--plots", os.path.join(out, "plots"), env=env)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "exit status 3" in r.stderr, r.stderr
    assert sorted(os.listdir(out)) == [], os.listdir(out)


def main(verify, script):
    with tempfile.TemporaryDirectory() as tmp:
        check_plots(verify, tmp)
        check_bands(script, tmp)
        check_failure_part_way(script, tmp)
        check_no_report_when_plots_fail(verify, tmp)
    print("plot_precision_report: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
