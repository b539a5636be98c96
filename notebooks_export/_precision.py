"""Helpers shared by the precision notebooks (not a notebook itself): find the repository and dsv4-verify, run
`dsv4-verify precision-report`, print its figures as text tables, and check the properties the notebooks'
text claims (and the numbers and rankings docs/precision.md prints), so that a wrong report fails the notebook
(and ctest, which runs the sources)."""
import glob
import json
import math
import os
import re
import subprocess
import sys
import tempfile


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

# The stages computed before the indexer's top-k selection: an fp32 policy's error there is rounding alone.
# After the selection a near-tie flipped by any rounding swaps an entry, which the output errors show.
BEFORE_TOPK = ("q_latent", "q", "kv", "compressor/entries", "indexer/q", "indexer/weights",
               "indexer/compressor/entries", "indexer/scores")
# The fp32 policy's bound there: every value is the fp64 result rounded once to fp32 (relative error at
# most 2^-24, about 6e-8); a stage compounds a few dozen such roundings, and the indexer's scores also the
# cancellation of 128-d dot products and 64-head sums, so its RMS relative error stays below 1e-4: NMSE
# below 1e-8. The committed reports show 1.2e-10 at most; bf16 storage (2^-8) is 1e-5 and more, so the
# bound separates the two (check_fp32_within_bound asserts both).
FP32_NMSE_BOUND = 1e-8


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


def mean(figure):
    """The mean over seeds of a figure {"mean", "low", "high", "values"}."""
    return number(figure["mean"])


def fmt(v):
    v = number(v)
    if v == 0:
        return "0"
    return f"{v:.3g}" if 1e-3 <= abs(v) < 1e4 else f"{v:.2e}"


def fmt_interval(figure, digits=None):
    """"mean [low, high]" (or the mean alone without an interval); recall with 4 decimals when digits=4."""
    f = (lambda v: f"{number(v):.{digits}f}") if digits else fmt
    if figure["low"] is None:
        return f(figure["mean"])
    return f"{f(figure['mean'])} [{f(figure['low'])}, {f(figure['high'])}]"


def policy(report, name):
    for p in report["policies"]:
        if p["name"] == name:
            return p
    raise KeyError(f"policy {name} is not in the report ({[p['name'] for p in report['policies']]})")


def stage(report, name, stage_name, layer=0):
    for s in policy(report, name)["layers"][layer]["stages"]:
        if s["stage"] == stage_name:
            return s
    raise KeyError(f"stage {stage_name} is not in layer {layer} of {name}")


def recall(report, name, layer=0):
    return policy(report, name)["layers"][layer]["end_to_end"]["topk_recall"]


def describe_input(report):
    i = report["input"]
    print(f"input: {i['kind']} {i['file'] or ''}".rstrip())
    print(f"producer: {i['producer']}")
    print(f"shape: {i['description']}")
    print(f"weights: {i['weights']} ({i['weights_reason']})")
    seeds = i.get("seeds") or []
    print(f"seeds: {', '.join(map(str, seeds))}" + ("  (mean [95% interval] over seeds)" if len(seeds) > 1 else ""))


def end_to_end_table(report):
    """Per layer and policy: top-k recall (rows with a choice, all rows, worst row), attention-output and
    layer-output NMSE, each the mean over seeds with its 95% interval."""
    for l, layer in enumerate(report["policies"][0]["layers"]):
        print(f"\nlayer {layer['layer']} (ratio {layer['compress_ratio']})")
        print(f"{'policy':<34} {'recall (choice)':>26} {'recall (all)':>26} {'worst':>7} {'attn NMSE':>30} "
              f"{'out NMSE':>30}")
        for p in report["policies"]:
            e = p["layers"][l]["end_to_end"]
            r = e["topk_recall"]
            cells = ("-", "-", "-")
            if r and r["rows"]:
                choice = fmt_interval(r["mean_with_choice"], 4) if r["rows_with_choice"] else "-"
                worst = f"{number(r['worst_row']['recall']):.4f}" if r["worst_row"] else "-"
                cells = (choice, fmt_interval(r["mean"], 4), worst)
            print(f"{p['name']:<34} {cells[0]:>26} {cells[1]:>26} {cells[2]:>7} "
                  f"{fmt_interval(e['attention_output']['nmse']):>30} {fmt_interval(e['layer_output']['nmse']):>30}")


def stage_table(report, layer, key="nmse", policies=None):
    """Stages x policies of one figure ("nmse", "cos_diff" or "max_rel"), means over seeds."""
    names = [p["name"] for p in report["policies"] if policies is None or p["name"] in policies]
    print(f"{key} per stage, layer {report['policies'][0]['layers'][layer]['layer']} (mean over seeds)")
    print(f"{'stage':<27}" + "".join(f"{n[:12]:>13}" for n in names))
    stages = [s["stage"] for s in report["policies"][0]["layers"][layer]["stages"]]
    for i, st in enumerate(stages):
        row = [fmt(mean(p["layers"][layer]["stages"][i][key])) for p in report["policies"] if p["name"] in names]
        print(f"{st:<27}" + "".join(f"{v:>13}" for v in row))


# --- checks: each raises AssertionError naming what the report got wrong -----------------------------------


def figure_values(figure):
    return [number(figure["mean"])] + [number(v) for v in figure["values"]]


def check_report(report, policies=None):
    """What every report must satisfy: format 2; the policies named (in order) when given; every recall
    figure (per seed, mean, per bucket, pooled) within [0, 1], rows with a choice at most the rows; every
    NMSE and cos-diff >= 0; per-seed values as many as the seeds."""
    assert report["format"] == "dsv4-precision-report" and report["format_version"] == 2, report["format_version"]
    names = [p["name"] for p in report["policies"]]
    if policies is not None:
        assert names == list(policies), f"policies {names}, expected {list(policies)}"
    seeds = max(1, len(report["input"].get("seeds") or []))
    for p in report["policies"]:
        for layer in p["layers"]:
            for s in layer["stages"]:
                for key in ("nmse", "cos_diff"):
                    assert len(s[key]["values"]) == seeds, (p["name"], s["stage"], key)
                    assert all(v >= 0 for v in figure_values(s[key])), (p["name"], s["stage"], key)
            r = layer["end_to_end"]["topk_recall"]
            if r is None:
                continue
            assert 0 <= r["rows_with_choice"] <= r["rows"], (p["name"], r["rows_with_choice"], r["rows"])
            figures = [r["mean"], r["mean_with_choice"], r["worst"], r["pooled_with_choice"]]
            for b in r["by_position"]:
                assert b["rows_with_choice"] <= b["rows"], (p["name"], b)
                figures += [b["mean"], b["mean_with_choice"], b["worst"]]
            for f in figures:
                assert all(0 <= v <= 1 for v in figure_values(f)), (p["name"], f)
            assert sum(r["histogram"]) == r["rows_with_choice"], (p["name"], "recall histogram")


def choice_buckets(report, name, layer=0):
    """The "mean" figure of each position bucket where the indexer chooses, in order of position."""
    return [b["mean"] for b in recall(report, name, layer)["by_position"] if b["rows_with_choice"] > 0]


def check_recall_falls(report, names, layer=0):
    """The text says recall falls with context. With intervals (several seeds): no bucket of positions where
    the indexer chooses has its 95% interval wholly above an earlier bucket's (no rise the seeds support),
    and the last bucket's interval lies wholly below the first's (a fall they do). With one seed: the last
    bucket's mean is below the first's."""
    for name in names:
        buckets = choice_buckets(report, name, layer)
        assert len(buckets) >= 2, (name, "fewer than two buckets with a choice")
        if buckets[0]["low"] is None:
            assert mean(buckets[-1]) < mean(buckets[0]), (name, mean(buckets[0]), mean(buckets[-1]))
            continue
        for i, earlier in enumerate(buckets):
            for later in buckets[i + 1:]:
                assert not separated(later, earlier), f"{name}: recall rises with position ({fmt_interval(earlier, 4)}" \
                                                      f" then {fmt_interval(later, 4)})"
        assert separated(buckets[0], buckets[-1]), (name, fmt_interval(buckets[0], 4), fmt_interval(buckets[-1], 4))


def fp32_nmse_before_topk(report, name="fp32", layer=0):
    """The largest NMSE (any seed) of `name` over the stages computed before the top-k selection."""
    worst = 0.0
    for s in policy(report, name)["layers"][layer]["stages"]:
        if s["stage"] in BEFORE_TOPK:
            worst = max([worst] + figure_values(s["nmse"]))
    return worst


def check_fp32_within_bound(report, layer=0):
    """The fp32 policy is within its bound of exact before the top-k (FP32_NMSE_BOUND); the bound is not
    vacuous: the bf16 policy, where present, is outside it."""
    worst = fp32_nmse_before_topk(report, "fp32", layer)
    assert worst < FP32_NMSE_BOUND, f"fp32 NMSE {worst:.3g} before the top-k exceeds {FP32_NMSE_BOUND}"
    if "bf16" in [p["name"] for p in report["policies"]]:
        assert fp32_nmse_before_topk(report, "bf16", layer) > FP32_NMSE_BOUND, "the fp32 bound admits bf16"


def separated(better, worse, higher_is_better=True):
    """The 95% intervals of two figures do not overlap, `better` on the better side."""
    if better["low"] is None or worse["low"] is None:
        return False
    if higher_is_better:
        return number(better["low"]) > number(worse["high"])
    return number(better["high"]) < number(worse["low"])


def end_to_end_figure(report, name, figure, layer=0):
    """One end-to-end figure of a policy: "recall" (rows with a choice), "attn" (attn/core NMSE) or "out"
    (layer-output NMSE)."""
    e = policy(report, name)["layers"][layer]["end_to_end"]
    if figure == "recall":
        return e["topk_recall"]["mean_with_choice"]
    if figure == "attn":
        return e["attention_output"]["nmse"]
    if figure == "out":
        return e["layer_output"]["nmse"]
    raise ValueError(f"figure {figure!r}: expected recall, attn or out")


# Student's t, two-sided 95%, for 1 .. 10 degrees of freedom (the report's own table, verify/precision/over_seeds.cpp,
# goes further; the committed studies have at most 5 seeds).
T_975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281)


def interval_over(values):
    """Mean and 95% interval (Student t) of per-seed values, as the report computes them."""
    n = len(values)
    m = sum(values) / n
    if n < 2:
        return {"mean": m, "low": None, "high": None, "values": list(values)}
    if n - 1 > len(T_975):
        raise ValueError(f"interval_over: {n} values, the t table stops at {len(T_975) + 1}")
    half = T_975[n - 2] * math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1) / n)
    return {"mean": m, "low": m - half, "high": m + half, "values": list(values)}


def paired(report, name, figure, against="official", layer=0):
    """Against `against` seed by seed, as the report's Markdown does: the recall difference ("recall") or the
    NMSE ratio ("attn", "out") of each seed, with its mean and 95% interval."""
    a = [number(v) for v in end_to_end_figure(report, name, figure, layer)["values"]]
    b = [number(v) for v in end_to_end_figure(report, against, figure, layer)["values"]]
    assert len(a) == len(b), (name, against, figure, len(a), len(b))
    return interval_over([x - y if figure == "recall" else x / y for x, y in zip(a, b)])


def parse_ranking(ranking):
    """"`a` > `b` ~ `c` > `d`" (the notation of docs/precision.md) as groups [[a], [b, c], [d]] and the operator
    between groups."""
    tokens = re.findall(r"`([^`]+)`|([<>~])", ranking)
    names = [t[0] for t in tokens if t[0]]
    ops = [t[1] for t in tokens if t[1]]
    assert names and len(ops) == len(names) - 1, f"not a ranking: {ranking!r}"
    groups = [[names[0]]]
    for op, name in zip(ops, names[1:]):
        if op == "~":
            groups[-1].append(name)
        else:
            groups.append([name])
    between = {op for op in ops if op != "~"}
    assert len(between) <= 1, f"{ranking!r} mixes > and <"
    return groups, between.pop() if between else None


def check_ranking(report, ranking, figure="recall", layer=0):
    """The text ranks policies in the notation "`a` > `b` ~ `c` > `d`" on `figure` ("recall": higher is better,
    written with >; "attn" or "out" NMSE: lower is better, written with <). Each policy of a group separates
    from each of the next group's (95% intervals, no overlap, on the better side); the policies of a group
    (`~`) overlap: the text claims no ranking there, so the intervals must not support one."""
    groups, op = parse_ranking(ranking)
    higher_is_better = figure == "recall"
    if op is not None:
        assert op == (">" if higher_is_better else "<"), f"{ranking!r}: {figure} is ranked best first with " \
                                                         f"{'>' if higher_is_better else '<'}"

    def get(name):
        return end_to_end_figure(report, name, figure, layer)

    def both(a, b):
        digits = 4 if higher_is_better else None
        return f"({a} {fmt_interval(get(a), digits)}, {b} {fmt_interval(get(b), digits)})"

    for group in groups:
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                assert not separated(get(a), get(b), higher_is_better) and \
                    not separated(get(b), get(a), higher_is_better), \
                    f"{figure}: {a} ~ {b} claimed, yet their intervals separate {both(a, b)}"
    for better, worse in zip(groups, groups[1:]):
        for a in better:
            for b in worse:
                assert separated(get(a), get(b), higher_is_better), \
                    f"{figure}: {a} {op} {b} claimed, yet their intervals do not separate {both(a, b)}"


# --- the numbers a page prints: each printed figure must be the report's, rounded ---------------------------

NUMBER = re.compile(r"[+\-\u2212]?(?:\d+\.?\d*|\.\d+)(?:e[+\-]?\d+)?")


def printed_numbers(cell):
    """The numbers of a printed cell ("0.0270 [0.0269, 0.0272]", "−0.0602", "2.67e-02") as (value, half a unit of
    the last printed digit)."""
    found = []
    for text in NUMBER.findall(cell):
        text = text.replace("\u2212", "-")
        mantissa, _, exponent = text.partition("e")
        digits = len(mantissa.partition(".")[2])
        found.append((float(text), 0.5 * 10.0 ** (int(exponent or 0) - digits)))
    return found


def check_printed(cell, actual, what):
    """A printed cell is the report's figure rounded: "mean [low, high]" against a figure {"mean", "low", "high"},
    or a single number against a value. The last printed digit decides the tolerance (half a unit of it)."""
    expected = [actual] if not isinstance(actual, dict) else \
        [actual["mean"]] + ([actual["low"], actual["high"]] if actual["low"] is not None else [])
    numbers = printed_numbers(cell)
    assert len(numbers) == len(expected), f"{what}: printed {cell!r}, the report has {len(expected)} numbers"
    for (printed, tolerance), value in zip(numbers, expected):
        assert abs(printed - number(value)) <= tolerance * (1 + 1e-9), \
            f"{what}: printed {cell!r}, the report has {', '.join(f'{number(v):.6g}' for v in expected)}"



def check_quoted(quoted, section_text, where):
    """Each (printed, value, what) of `quoted` is the report's figure, rounded, and `section_text` (the text of
    `where`, e.g. "docs/precision.md section 4") prints it. A value is a figure, a number, or a tuple of numbers
    printed in that order ("101 to 134")."""
    text = " ".join(section_text.split())
    for printed, value, what in quoted:
        if isinstance(value, tuple):
            numbers = printed_numbers(printed)
            assert len(numbers) == len(value), f"{what}: printed {printed!r}, expected {len(value)} numbers"
            for (shown, tolerance), v in zip(numbers, value):
                assert abs(shown - v) <= tolerance * (1 + 1e-9), f"{what}: printed {printed!r}, the report has {value}"
        else:
            check_printed(printed, value, what)
        assert re.search(rf"(?<![\d.]){re.escape(printed)}(?![\d])", text), f"{where} no longer quotes {printed} ({what})"
        print(f"{printed:>32}  {what}")

def markdown_section(path, heading):
    """The text of the section of a Markdown file (relative to the repository) whose heading starts with
    `heading` ("## 2."), up to the next heading of its level."""
    with open(os.path.join(ROOT, path)) as f:
        text = f.read()
    level = heading.split(" ")[0] + " "
    start = [i for i, line in enumerate(text.splitlines()) if line.startswith(heading)]
    assert len(start) == 1, f"{path}: {len(start)} headings start with {heading!r}"
    lines = text.splitlines()[start[0]:]
    end = next((i for i, line in enumerate(lines[1:], 1) if line.startswith(level)), len(lines))
    return "\n".join(lines[:end])


def markdown_table(text, header):
    """The rows of the one Markdown table in `text` whose header cells are `header` (a list), each a dict from
    header cell to cell."""
    lines = text.splitlines()

    def cells(line):
        return [c.strip() for c in line.strip().strip("|").split("|")]

    starts = [i for i, line in enumerate(lines) if line.startswith("|") and cells(line) == list(header)]
    assert len(starts) == 1, f"{len(starts)} tables have the header {' | '.join(header)}"
    rows = []
    for line in lines[starts[0] + 2:]:
        if not line.startswith("|"):
            break
        row = cells(line)
        assert len(row) == len(header), f"row {line!r} has {len(row)} cells, the header {len(header)}"
        rows.append(dict(zip(header, row)))
    return rows
