# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Precision policies at V4-Flash dims (synthetic inputs)
#
# The report of `docs/precision.md`: one V4-Flash CSA layer (dim 4096, 64 heads x 512, indexer
# 64 heads x 128, top-512) with random weights on the checkpoint's number grids and x ~ N(0, 1) in
# bf16, a 4096-token prefill, every named policy against `exact`. Making it took half an hour on
# two shared cores, so this notebook reads the committed JSON instead of running it:
#
# ```
# dsv4-verify precision-report --synth flash --ratio 4 --prefill 4096 --chunk 512 --seed 1 \
#     --json docs/precision/flash-csa-p4096.json --markdown docs/precision/flash-csa-p4096.md \
#     --plots docs/precision/flash-csa-p4096
# ```
#
# The indexer keeps 512 of the (t + 1) / 4 visible entries, so it has a choice only from position
# 2051 on; before that its recall is 1 by construction. Random weights do not attend like a trained
# model: the recall is a lower-fidelity signal than on a real capture.

# %%
import matplotlib.pyplot as plt

import _precision as pr
import plot_precision_report as ppr

plt.rcParams["figure.dpi"] = 72
report = pr.load_report("docs/precision/flash-csa-p4096.json")
pr.describe_input(report)
pr.end_to_end_table(report)

# %% [markdown]
# ## Recall against context length
#
# Mean recall per bucket of query positions (from position 2051 on the indexer chooses).

# %%
fig, ax = plt.subplots(figsize=(8, 4.5))
ppr.plot_recall_vs_position(report, ax, 0)
ax.set_xlim(1800, 4100)
ax.legend(fontsize=7)
fig.tight_layout()
print(f"{'positions':<12}" + "".join(f"{p['name'][:12]:>13}" for p in report["policies"]))
for b, bucket in enumerate(report["policies"][0]["layers"][0]["end_to_end"]["topk_recall"]["by_position"]):
    if bucket["rows_with_choice"] == 0:
        continue
    cells = [pr.fmt(p["layers"][0]["end_to_end"]["topk_recall"]["by_position"][b]["mean"]) for p in report["policies"]]
    print(f"{bucket['first_position']:>5}-{bucket['last_position']:<6}" + "".join(f"{c:>13}" for c in cells))

# %% [markdown]
# ## Per-row recall distribution
#
# Rows where the indexer chooses, binned by recall (20 bins over [0, 1]).

# %%
fig, ax = plt.subplots(figsize=(8, 4))
bins = report["recall_histogram"]["bins"]
centres = [(i + 0.5) / bins for i in range(bins)]
for i, p in enumerate(ppr.compared(report)):
    recall = p["layers"][0]["end_to_end"]["topk_recall"]
    total = max(1, sum(recall["histogram"]))
    ax.plot(centres, [c / total for c in recall["histogram"]], linestyle=ppr.style(i), label=p["name"])
ax.set_xlabel("recall of a row")
ax.set_ylabel("fraction of rows with a choice")
ax.set_xlim(0.5, 1.0)
ax.legend(fontsize=7)
ax.grid(True, alpha=0.3)
fig.tight_layout()

# %% [markdown]
# ## Error per stage by precision

# %%
fig, ax = plt.subplots(figsize=(9, 4.5))
ppr.plot_stage_nmse(report, ax, 0)
ax.legend(fontsize=6)
fig.tight_layout()
pr.stage_table(report, 0, "nmse")

# %%
pr.stage_table(report, 0, "max_rel")

# %% [markdown]
# ## Error distributions
#
# |policy - exact| per element in units of the RMS of its token's exact row (log10).

# %%
fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
for ax, stage in zip(axes, ppr.DISTRIBUTION_STAGES):
    ppr.plot_error_distribution(report, ax, 0, stage)
axes[0].legend(fontsize=6)
fig.tight_layout()
