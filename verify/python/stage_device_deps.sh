#!/usr/bin/env bash
# Copies the header-only dependencies of the Python module (Eigen, nlohmann-json, fmt) into
# .deps-python/include, an ignored folder a device call can carry, for verify/python/device/.
set -euo pipefail
cd "$(dirname "$0")/../.."
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.deps-python/' "$exclude" 2>/dev/null || echo '/.deps-python/' >> "$exclude"
rm -rf .deps-python && mkdir -p .deps-python/include
cp -r /usr/include/eigen3/Eigen /usr/include/eigen3/unsupported /usr/include/nlohmann /usr/include/fmt .deps-python/include/
du -sh .deps-python
