#!/usr/bin/env bash
# Regenerates notebooks_export/*.ipynb (executed, with outputs) and *.html from the jupytext sources
# notebooks_export/*.py (files starting with "_" are helpers, not notebooks). Needs jupytext,
# nbconvert, nbclient and ipykernel (pip), matplotlib and a built dsv4-verify ($DSV4_VERIFY, else the
# newest build/*/verify/cli/dsv4-verify). Each export is written beside its source only when the
# notebook ran through, so a failed run leaves the previous exports as they were.
set -euo pipefail
cd "$(dirname "$0")/../notebooks_export"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for source in [!_]*.py; do
  name=${source%.py}
  echo "export_notebooks: $name"
  jupytext --quiet --to ipynb --output "$tmp/$name.ipynb" "$source"
  # The notebooks import _precision.py from this folder.
  PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" jupyter nbconvert --log-level WARN --to notebook --execute \
    --ExecutePreprocessor.timeout=900 --output-dir "$tmp/executed" "$tmp/$name.ipynb"
  jupyter nbconvert --log-level WARN --to html --output-dir "$tmp/executed" "$tmp/executed/$name.ipynb"
  mv "$tmp/executed/$name.ipynb" "$name.ipynb"
  mv "$tmp/executed/$name.html" "$name.html"
done
ls -l ./*.ipynb ./*.html
