#!/usr/bin/env python3
"""Captures of DeepSeek's code with each bug injected, replayed by dsv4-verify: one table row per
bug with the first failing stage (stage-local), the margin by which it failed (the record's
smallest passing atol over the row's effective atol), and the diagnosis of the injected stage.

    python3 verify/adapters/injected_replays.py --inference-dir PATH/inference --dsv4-verify BIN \\
        --out-dir DIR [--device cuda] [--kernels official] [--config tiny] [--prefill 37] [--decode 5] \\
        [--bugs kv:round-toward-zero,...]      (default: every bug of bug_injection.INJECTABLE_BUGS)

Writes DIR/<bug>.h5 (removed after the replay unless --keep), DIR/<bug>.json (the report) and
DIR/summary.md, and prints the table. Exit 0 when every bug is diagnosed as itself and nothing
fails before its stage, 1 otherwise.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))

# Bugs that only show on blocks with amax below 1e-4: their captures use --quantization-edges.
NEEDS_EDGES = ("amax-floor",)


def injectable_bugs() -> List[str]:
    """bug_injection.INJECTABLE_BUGS, read from the source (no torch needed here)."""
    with open(os.path.join(HERE, "bug_injection.py")) as f:
        for node in ast.parse(f.read()).body:
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "INJECTABLE_BUGS":
                return list(ast.literal_eval(node.value))
    raise AssertionError("bug_injection.py defines no INJECTABLE_BUGS")


def file_stem(bug: str) -> str:
    return bug.replace("/", "_").replace(":", "__").replace("^", "").replace("+", "plus")


def capture(bug: Optional[str], out: str, opts, quantization_edges: bool = False) -> None:
    """The adapter's capture with `bug` injected (None: the clean capture); the amax-floor bugs, or
    quantization_edges, get --quantization-edges."""
    cmd = [sys.executable, os.path.join(HERE, "deepseek_capture.py"), "--inference-dir", opts.inference_dir,
           "--out", out, "--config", opts.config, "--batch", str(opts.batch), "--prefill", str(opts.prefill),
           "--decode", str(opts.decode), "--device", opts.device, "--kernels", opts.kernels]
    if bug is not None:
        cmd += ["--inject-bug", bug]
    if opts.layers:
        cmd += ["--layers", opts.layers]
    if quantization_edges or (bug is not None and any(k in bug for k in NEEDS_EDGES)):
        cmd.append("--quantization-edges")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"deepseek_capture.py --inject-bug {bug}: exit {r.returncode}: {r.stderr.strip()[-2000:]}")


def replay(dsv4_verify: str, cap: str, report: str, mode: str = "stage-local") -> Dict:
    r = subprocess.run([dsv4_verify, "replay", cap, "--mode", mode, "--diagnose", "--json", report],
                       capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise RuntimeError(f"dsv4-verify replay {cap}: exit {r.returncode}: {r.stderr.strip()}")
    with open(report) as f:
        return json.load(f)


def margin(record: Dict) -> str:
    """measured / allowed for a failing dense record (min atol to pass over the effective atol)."""
    m = record.get("metrics") or {}
    if record.get("comparator") == "dense" and m.get("atol"):
        return f"{float(m['min_atol_to_pass']) / float(m['atol']):.3g}"
    if record.get("comparator") == "index_set":
        return f"{m.get('rows_failed')} rows"
    return "-"


def summarize(bug: str, report: Dict) -> Dict:
    stage = bug.split(":")[0]
    first = report.get("first_failure")
    first_record = None
    if first:
        first_record = next(r for r in report["records"] if r["layer"] == first["layer"] and r["call"] == first["call"]
                            and r["stage"] == first["stage"])
    diagnosed = [r for r in report["records"] if r["stage"] == stage and r.get("diagnosis")]
    d = diagnosed[0]["diagnosis"] if diagnosed else None
    best = d["trials"][0] if d and d["trials"] else None
    named = bool(best) and best["mutation"] == bug and best["introduced"] == 0 and \
        best["explained"] >= 0.9 * d["oracle_differing"]
    return {
        "bug": bug,
        "first_failure": f"L{first['layer']} c{first['call']} {first['stage']}" if first else "none (passes)",
        "fails_at_stage": bool(first) and first["stage"] == stage,
        "nothing_before": not first or first["stage"] == stage,
        "margin": margin(first_record) if first_record else "-",
        "diagnosis": d["summary"] if d else "no diagnosis (the stage is bitwise the oracle's)",
        "named": named,
    }


def table(rows: List[Dict]) -> str:
    out = ["| bug | first failure (stage-local) | measured / allowed | diagnosed as itself | diagnosis |",
           "|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| `{r['bug']}` | {r['first_failure']} | {r['margin']} | {'yes' if r['named'] else 'NO'} | "
                   f"{r['diagnosis'].replace('|', '/')} |")
    return "\n".join(out) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--inference-dir", required=True)
    p.add_argument("--dsv4-verify", required=True, help="the dsv4-verify binary")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--config", default="tiny")
    p.add_argument("--layers", default="0,1,2")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prefill", type=int, default=13)
    p.add_argument("--decode", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--kernels", default="standin", choices=["standin", "official"])
    p.add_argument("--bugs", default=None, help="comma-separated names (default: every injectable bug)")
    p.add_argument("--keep", action="store_true", help="keep the capture files")
    opts = p.parse_args(argv)
    bugs = opts.bugs.split(",") if opts.bugs else injectable_bugs()
    os.makedirs(opts.out_dir, exist_ok=True)
    rows = []
    for bug in bugs:
        cap = os.path.join(opts.out_dir, file_stem(bug) + ".h5")
        capture(bug, cap, opts)
        report = replay(opts.dsv4_verify, cap, os.path.join(opts.out_dir, file_stem(bug) + ".json"))
        if not opts.keep:
            os.remove(cap)
        rows.append(summarize(bug, report))
        print(f"{bug}: first failure {rows[-1]['first_failure']}; {rows[-1]['diagnosis']}", file=sys.stderr, flush=True)
    text = table(rows)
    with open(os.path.join(opts.out_dir, "summary.md"), "w") as f:
        f.write(text)
    print(text)
    return 0 if all(r["named"] and r["nothing_before"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
