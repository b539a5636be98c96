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
# # Precision policies on the bundled captures
#
# `dsv4-verify precision-report` runs each captured layer from its captured `x` and weights under
# every named precision policy and compares every stage with the `exact` policy (fp64, no
# quantization). This notebook runs it on the captures in `data/captures/` and plots
# recall against context length, the error per stage by precision and the error distributions.
#
# **What these numbers can say.** Every bundled capture has random weights (the oracle's `synth`,
# and DeepSeek's own code run with random weights), and tiny dims. Random weights do not attend like
# a trained model, so the recall here is a lower-fidelity signal than on a capture of a real
# model; the report states the input kind and the weights' origin, and so does every table below.
#
# The notebook checks what its text says (a wrong report fails it, and ctest runs it): every
# report has every named policy, recall within [0, 1], the fp32 policy within its bound of exact
# before the top-k (and bf16 outside it), and recall falling with context where the text says so.

# %%
import glob
import os

import matplotlib.pyplot as plt

import _precision as pr
import plot_precision_report as ppr

plt.rcParams["figure.dpi"] = 72
captures = sorted(os.path.relpath(c, pr.ROOT) for c in glob.glob(os.path.join(pr.ROOT, "data", "captures", "*.h5")))
print("\n".join(captures))

# %% [markdown]
# ## Every bundled capture, every policy
#
# Recall is per query row |exact top-k ∩ policy top-k| / |exact top-k|; "choice" is the mean over
# rows where more entries are visible than the indexer keeps (elsewhere recall is 1 by construction).

# %%
NAMED = ["exact", "official", "fp8-indexer", "fp8-indexer-no-hadamard", "fp4-indexer-no-hadamard", "no-kv-quant",
         "bf16", "fp32", "mxfp4-indexer", "nvfp4-indexer", "fp32-probs", "fp32-indexer-scores", "fp8-indexer-keys-only",
         "fp4-indexer-keys-only"]
reports = {}
for path in captures:
    name = os.path.basename(path)
    reports[name] = pr.precision_report(path)
    print(f"=== {name}")
    pr.describe_input(reports[name])
    pr.end_to_end_table(reports[name])
    print()
    pr.check_report(reports[name], NAMED)
    for l, layer in enumerate(reports[name]["policies"][0]["layers"]):
        pr.check_fp32_within_bound(reports[name], l)

# %% [markdown]
# ## Recall against context length
#
# The bundled captures are short: at most 42 positions, so the indexer (top-8 at tiny dims) has a
# choice only in the last few rows. A synthetic run at the same tiny dims over 1000 positions and
# five seeds (`docs/precision/tiny-csa-p1000.md`) shows how recall falls as the choice widens
# (top-8 of up to 250 compressed entries): for every quantized indexer the mean recall of a bucket
# of positions never rises from one bucket to the next. Same caveat: random weights.

# %%
long_context = pr.precision_report("--synth", "tiny", "--prefill", "1000", "--batch", "1", "--seed", "3", "--seeds", "5")
pr.describe_input(long_context)
pr.end_to_end_table(long_context)
pr.check_report(long_context, NAMED)
pr.check_fp32_within_bound(long_context)
pr.check_recall_falls(long_context, ["official", "fp8-indexer", "mxfp4-indexer", "nvfp4-indexer", "bf16",
                                     "fp4-indexer-keys-only", "fp8-indexer-keys-only"])
# The committed report is this run.
committed = pr.load_report("docs/precision/tiny-csa-p1000.json")
assert [pr.mean(p["layers"][0]["end_to_end"]["topk_recall"]["mean_with_choice"]) for p in committed["policies"]] == \
    [pr.mean(p["layers"][0]["end_to_end"]["topk_recall"]["mean_with_choice"]) for p in long_context["policies"]]

fig, axes = plt.subplots(1, 2, figsize=(12, 4))
ppr.plot_recall_vs_position(reports["deepseek-official-tiny-p37-d5.h5"], axes[0], 1)
axes[0].set_title("DeepSeek capture, layer 1 (CSA): recall vs exact")
ppr.plot_recall_vs_position(long_context, axes[1], 0)
axes[1].set_title("tiny synthetic, 1000 positions, 5 seeds: recall vs exact (95% bands)")
axes[1].legend(fontsize=7)
fig.tight_layout()

# %% [markdown]
# ## Error per stage by precision
#
# NMSE against exact for every stage of the DeepSeek capture's three layers (window-only, CSA,
# HCA). Indexer-only policies change nothing outside the indexer; `bf16` and `fp32` (no
# quantization) bracket the quantized policies.

# %%
ds = reports["deepseek-official-tiny-p37-d5.h5"]
fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
for layer, ax in enumerate(axes):
    ppr.plot_stage_nmse(ds, ax, layer)
axes[-1].legend(fontsize=6)
fig.tight_layout()
pr.stage_table(ds, 1, "nmse", ["official", "fp8-indexer", "no-kv-quant", "bf16", "nvfp4-indexer"])

# %% [markdown]
# ## Error distributions
#
# Each element's |policy - exact| in units of the RMS of its token's exact row (log10), for the
# indexer scores, the attention output and the layer output of the CSA layer.

# %%
fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
for ax, stage in zip(axes, ppr.DISTRIBUTION_STAGES):
    ppr.plot_error_distribution(ds, ax, 1, stage)
axes[0].legend(fontsize=6)
fig.tight_layout()
