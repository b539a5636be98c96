#!/usr/bin/env bash
# Installs what dsv4-oracle needs on Debian 12 (run as root). Idempotent: installs only what is missing.
set -euo pipefail

apt_packages=(
  build-essential cmake ninja-build pkg-config git
  libeigen3-dev libhdf5-dev doctest-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev
  python3 python3-pip python3-dev python3-venv
)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python serves the cross-checks, capture adapters and notebooks (never the oracle itself), and the
# dsv4_oracle module: nanobind (its bindings, found by CMake), scikit-build-core (`pip install .`),
# pytest (its tests, run by ctest).
python_modules=(numpy h5py ml_dtypes matplotlib nanobind scikit_build_core pytest)
pip_names=(numpy h5py ml-dtypes matplotlib nanobind scikit-build-core pytest)
need=()
for i in "${!python_modules[@]}"; do
  python3 -c "import ${python_modules[$i]}" 2>/dev/null || need+=("${pip_names[$i]}")
done
if ((${#need[@]})); then
  echo "install-deps: pip install ${need[*]}"
  python3 -m pip install --quiet --disable-pip-version-check "${need[@]}" 2>/dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check --break-system-packages "${need[@]}"
fi
echo "install-deps: all dependencies present"
