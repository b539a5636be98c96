"""Helpers shared by the precision notebooks (not a notebook itself): find the repository and dsv4-verify, run
`dsv4-verify precision-report`, and print its figures as text tables."""
import glob
import json
import os
import subprocess
import sys
import tempfile


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))


def find_verify():
    """$DSV4_VERIFY, else the newest build/*/verify/cli/dsv4-verify."""
    if os.environ.get("DSV4_VERIFY"):
        return os.path.abspath(os.environ["DSV4_VERIFY"])
    found = glob.glob(os.path.join(ROOT, "build", "*", "verify", "cli", "dsv4-verify"))
    if not found:
        raise FileNotFoundError("no dsv4-verify: build it (cmake --preset release) or set DSV4_VERIFY")
    return max(found, key=os.path.getmtime)


def precision_report(*args):
    """Runs `dsv4-verify precision-report ARGS --json TMP` in the repository's root (paths in ARGS are
    relative to it) and returns the JSON report."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "report.json")
        cmd = [find_verify(), "precision-report", *args, "--json", out]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                              env=dict(os.environ, OMP_WAIT_POLICY="passive"))
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr}")
        with open(out) as f:
            return json.load(f)


def load_report(path):
    with open(os.path.join(ROOT, path)) as f:
        return json.load(f)


def number(v):
    return float(v) if isinstance(v, str) else v


def fmt(v):
    v = number(v)
    if v == 0:
        return "0"
    return f"{v:.3g}" if 1e-3 <= abs(v) < 1e4 else f"{v:.2e}"


def describe_input(report):
    i = report["input"]
    print(f"input: {i['kind']} {i['file'] or ''}".rstrip())
    print(f"producer: {i['producer']}")
    print(f"shape: {i['description']}")
    print(f"weights: {i['weights']} ({i['weights_reason']})")


def end_to_end_table(report):
    """Per layer and policy: top-k recall (all rows, rows with a choice, worst), attention-output and
    layer-output NMSE."""
    head = f"{'policy':<25} {'recall':>8} {'choice':>8} {'worst':>7} {'attn NMSE':>10} {'out NMSE':>10}"
    for l, layer in enumerate(report["policies"][0]["layers"]):
        print(f"\nlayer {layer['layer']} (ratio {layer['compress_ratio']})")
        print(head)
        for p in report["policies"]:
            e = p["layers"][l]["end_to_end"]
            r = e["topk_recall"]
            recall = (fmt(r["mean"]), fmt(r["mean_with_choice"]) if r["rows_with_choice"] else "-", fmt(r["worst"])) \
                if r and r["rows"] else ("-", "-", "-")
            print(f"{p['name']:<25} {recall[0]:>8} {recall[1]:>8} {recall[2]:>7} "
                  f"{fmt(e['attention_output']['nmse']):>10} {fmt(e['layer_output']['nmse']):>10}")


def stage_table(report, layer, key="nmse", policies=None):
    """Stages x policies of one figure ("nmse", "cos_diff" or "max_rel")."""
    names = [p["name"] for p in report["policies"] if policies is None or p["name"] in policies]
    print(f"{key} per stage, layer {report['policies'][0]['layers'][layer]['layer']}")
    print(f"{'stage':<27}" + "".join(f"{n[:12]:>13}" for n in names))
    stages = [s["stage"] for s in report["policies"][0]["layers"][layer]["stages"]]
    for i, stage in enumerate(stages):
        row = [fmt(p["layers"][layer]["stages"][i][key]) for p in report["policies"] if p["name"] in names]
        print(f"{stage:<27}" + "".join(f"{v:>13}" for v in row))
