# Shared by the scripts: toolchain pins and lookup. Source it, don't run it.
CUDA_PIP_PINS=(
  "nvidia-cuda-nvcc==13.0.88"
  "nvidia-nvvm==13.0.88"        # must match nvcc: a newer nvvm emits PTX that ptxas 13.0 rejects
  "nvidia-cuda-crt==13.0.88"
  "nvidia-cuda-runtime==13.0.96"
  "nvidia-cuda-cccl==13.0.85"
)
CMAKE_PIP_PIN="cmake==3.31.6"

# nvcc: the one lookup lives in scripts/find-nvcc (build.rs and CMake use it too).
find_nvcc() { "$(dirname "${BASH_SOURCE[0]}")/find-nvcc"; }

# The cmake scripts/setup installs from PyPI when the machine has none (its
# binaries, not pip's Python wrappers), ahead on PATH: the scripts use it,
# and so does a shell that sources this file (`source scripts/env.sh`).
SYMM_CMAKE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.toolchain/cmake-pip/cmake/data/bin"
if [ -x "$SYMM_CMAKE_DIR/cmake" ] && [[ ":$PATH:" != *":$SYMM_CMAKE_DIR:"* ]]; then
  export PATH="$SYMM_CMAKE_DIR:$PATH"
fi

# The first cmake that runs (a broken wrapper on PATH is skipped).
cmake_bin() {
  local c
  for c in "$(command -v cmake || true)" "$SYMM_CMAKE_DIR/cmake"; do
    [ -n "$c" ] && [ -x "$c" ] && "$c" --version >/dev/null 2>&1 && { echo "$c"; return 0; }
  done
  return 1
}

ctest_bin() { echo "$(dirname "$(cmake_bin)")/ctest"; }

cmake_ok() {
  local c v
  c=$(cmake_bin) || return 1
  v=$("$c" --version | head -1 | awk '{print $3}')
  [ "$(printf '%s\n3.18\n' "$v" | sort -V | head -1)" = "3.18" ]
}

# The real NCCL (header + libnccl.so.2) that libsymmcomm_nccl.so stands in
# for: its nccl.h is what the export check and the C tests compile against,
# and its library is the fallback the CPU tests forward to.
NCCL_PIP_PIN="nvidia-nccl-cu13==2.28.9"
NCCL_HOME="$PWD/.toolchain/nccl/nvidia/nccl"   # include/nccl.h, lib/libnccl.so.2

# pytest for the Python package's tests (python/tests), when the machine's
# python3 has none: pinned with its dependencies, into .toolchain/pytest.
# pytest 8.3 also needs exceptiongroup and tomli before Python 3.11 (installed with --no-deps).
PYTEST_PIP_PINS=("pytest==8.3.5" "pluggy==1.5.0" "iniconfig==2.0.0" "packaging==24.2"
                 "exceptiongroup==1.2.2; python_version < '3.11'" "tomli==2.2.1; python_version < '3.11'")
PYTEST_HOME="$PWD/.toolchain/pytest"
