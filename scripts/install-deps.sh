#!/usr/bin/env bash
# Installs what dsv4-oracle needs on Debian 12 (run as root). Idempotent: installs only what is missing.
set -euo pipefail

apt_packages=(
  build-essential cmake ninja-build pkg-config git clang-format
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

# The configure test (cmake/tests/) needs Debian 12's unpatched FindCUDAToolkit module: the package
# cmake-data 3.25.1-1 is downloaded (not installed) into build/deps/, since this machine's copy of
# the module may be patched.
deb_dir="$(cd "$(dirname "$0")/.." && pwd)/build/deps"
cmake_data=cmake-data=3.25.1-1
if [[ ! -f $deb_dir/cmake-data_3.25.1-1_all.deb ]]; then
  echo "install-deps: apt-get download $cmake_data (into build/deps/, for the configure test)"
  mkdir -p "$deb_dir"
  (cd "$deb_dir" && { apt-get download -qq -o APT::Sandbox::User=root "$cmake_data" 2>/dev/null ||
    { apt-get update -qq && apt-get download -qq -o APT::Sandbox::User=root "$cmake_data"; }; }) ||
    echo "install-deps: warning: could not download $cmake_data (the configure test will try again)"
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
