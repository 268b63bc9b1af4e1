# Shared by the scripts: toolchain pins and lookup. Source it, don't run it.
CUDA_PIP_PINS=(
  "nvidia-cuda-nvcc==13.0.88"
  "nvidia-nvvm==13.0.88"        # must match nvcc: a newer nvvm emits PTX that ptxas 13.0 rejects
  "nvidia-cuda-crt==13.0.88"
  "nvidia-cuda-runtime==13.0.96"
  "nvidia-cuda-cccl==13.0.85"
)
CMAKE_PIP_PIN="cmake==3.31.6"

find_nvcc() {
  local c
  for c in "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" "$(command -v nvcc || true)" \
           "$PWD/.toolchain/nvidia/cu13/bin/nvcc" /usr/local/cuda/bin/nvcc; do
    [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
  done
  return 1
}

cmake_bin() {
  local c
  for c in "$(command -v cmake || true)" "$PWD/.toolchain/cmake-pip/cmake/data/bin/cmake"; do
    [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
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
