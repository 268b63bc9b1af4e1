#!/usr/bin/env bash
# The Python package's GPU pass, one command (needs torch; Triton for the
# Triton stages; no Rust, no pytest):
#
#   python/tests/gpu/run.sh [STAGE...]
#
# Stages (default: all, in this order):
#   multirank-2, multirank-4   python/tests/gpu/multirank.py under torchrun at 2 / 4 ranks:
#                              every collective x dtype, graph capture, symmetric tensors,
#                              signals, lifetime, communicators/split, the Triton example,
#                              the Triton bounded wait, the fused ops
#   kill                       a peer SIGKILLed mid-collective: the survivor's exception
#                              within SYMM_TIMEOUT + 1 s, and abort() returns
#   example-2                  examples/python/one_shot_all_reduce_triton.py at 2 ranks
#   readme-2                   the README's Python example at 2 ranks
#
# The library: $SYMMCOMM_LIBRARY, else .device/lib/libsymmcomm.so (scripts/device-pack),
# else the package's own search (target/release, the system's). Ranks share the GPUs
# (SYMM_TEST_SHARED_DEVICES=1) when there are fewer GPUs than ranks. Each stage has
# its own time limit (SYMMCOMM_GPU_STAGE_TIMEOUT, default 480 s). Exit 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1   # never NVLink multicast
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
if [[ -z ${SYMMCOMM_LIBRARY:-} && -f .device/lib/libsymmcomm.so ]]; then
  export SYMMCOMM_LIBRARY=$PWD/.device/lib/libsymmcomm.so
fi
export SYMM_TIMEOUT=${SYMM_TIMEOUT:-30}   # a broken test fails in seconds, not minutes
LIMIT=${SYMMCOMM_GPU_STAGE_TIMEOUT:-480}
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
if [[ $NGPU -lt 1 ]]; then
  echo "skipped: no CUDA device (nvidia-smi lists none)"
  exit 77   # not a pass: callers tell a skip from a run
fi
echo "== symmcomm Python GPU pass: $NGPU GPU(s); library ${SYMMCOMM_LIBRARY:-(package search)}"

ranks_env() {  # share the GPUs when there are fewer than the ranks
  if [[ $1 -gt $NGPU ]]; then echo 1; else echo "${SYMM_TEST_SHARED_DEVICES:-0}"; fi
}

run_torchrun() {  # NRANKS SCRIPT ARGS...
  local n=$1; shift
  SYMM_TEST_SHARED_DEVICES=$(ranks_env "$n") timeout --kill-after=10 "$LIMIT" \
    torchrun --standalone --nproc-per-node "$n" "$@"
}

stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && stages=(multirank-2 multirank-4 kill example-2 readme-2)
rc=0
for stage in "${stages[@]}"; do
  echo "-- $stage"
  start=$SECONDS
  case $stage in
    multirank-*) run_torchrun "${stage#multirank-}" python/tests/gpu/multirank.py 2>&1 | grep -vE "^(W[0-9]+|\[W)" ;;
    kill) SYMM_TEST_SHARED_DEVICES=$(ranks_env 2) timeout --kill-after=10 "$LIMIT" \
            python3 python/tests/gpu/kill_peer.py --timeout 5 ;;
    example-*) run_torchrun "${stage#example-}" examples/python/one_shot_all_reduce_triton.py --numel 1000003 ;;
    readme-*) run_torchrun "${stage#readme-}" python/tests/readme_example.py ;;
    *) echo "unknown stage $stage"; false ;;
  esac
  status=${PIPESTATUS[0]}
  if [[ $status -ne 0 ]]; then
    rc=1
    [[ $status -eq 124 || $status -eq 137 ]] && echo "FAIL $stage: no result within ${LIMIT} s"
    echo "FAIL $stage (exit $status, $((SECONDS - start)) s)"
  else
    echo "PASS $stage ($((SECONDS - start)) s)"
  fi
done
exit $rc
