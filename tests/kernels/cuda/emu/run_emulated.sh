#!/usr/bin/env bash
# Runs the `gpu` tests of tests/kernels/cuda against the CUDA kernels EXECUTED on the host
# (cuda_emu.h: CUDA threads as std::threads; cuda_stubs.cc: runtime + cuBLAS on host
# memory) on a machine without a GPU. A check of the kernels' logic and indexing before a
# real device run (scripts/gpu_check.sh), not a substitute for it.
#
#   tests/kernels/cuda/emu/run_emulated.sh [GTEST_FILTER]      (default: *Int8*:*CudaProjector*)
#   KVFOLD_EMU_BASE=build-x  a configured and built CUDA-OFF build dir to link against
#                            (default: build); KVFOLD_EMU_ASAN=1 adds -fsanitize=address.
# Needs nvcc's headers (/usr/local/cuda/include), not a GPU or libcudart. Slow: each
# engine-level test takes a minute or two on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
ROOT=$(pwd)
BASE="${KVFOLD_EMU_BASE:-build}"
OUT="$BASE/cuda_emu"
FILTER="${1:-*Int8*:*CudaProjector*}"
CUDA_INC="${CUDA_HOME:-/usr/local/cuda}/include"
mkdir -p "$OUT/obj"
ninja -C "$BASE" kvfold_memory kvfold_engine kvfold_model kvfold_kernels kvfold_quant >/dev/null
# 1. The .cu files as host C++: the emulation header first, launches as emu::Launcher calls.
for f in attention kv_cache elementwise embedding rmsnorm rope sampling; do
  /usr/bin/python3 - "$ROOT/kernels/cuda/$f.cu" "$OUT/${f}_emu.cc" "$f" <<'PY'
import re, sys
src, dst, name = sys.argv[1:4]
s = open(src).read()
inc = '#include "kernels/cuda/%s.cuh"' % name
assert inc in s
s = s.replace(inc, '#include "tests/kernels/cuda/emu/cuda_emu.h"\n' + inc, 1)
s = re.sub(r'extern __shared__ float (\w+)\[\];', r'float* \1 = ::emu::g_smem.data();', s)
s = re.sub(r'(\w+)<<<(.*?)>>>\(', lambda m: 'emu::Launcher(%s).Run(%s, ' % (m.group(2), m.group(1)), s,
           flags=re.S)
open(dst, 'w').write(s)
PY
done
# 2. Compile (2 at a time) and link against the CUDA-off build's libraries.
CXX=(g++ -std=c++20 -O2 -w -pthread -I"$ROOT" -I"$CUDA_INC")
[ "${KVFOLD_EMU_ASAN:-0}" = 1 ] && CXX+=(-fsanitize=address -g)
SRCS=("$OUT"/*_emu.cc tests/kernels/cuda/emu/cuda_stubs.cc kernels/cuda/gemm.cc
      kernels/cuda/cuda_status.cc kernels/cuda/cuda_backend.cc
      tests/kernels/cuda/int8_kv_cuda_test.cc tests/kernels/cuda/cuda_backend_test.cc
      tests/kernels/cuda/cuda_memory_mode_test.cc tests/kernels/cuda/projector_cuda_test.cc
      tests/kernels/cuda/attention_test.cc tests/kernels/cuda/kv_quant_cuda_test.cc
      tests/kernels/cuda/ops_test.cc tests/kernels/cuda/sampling_test.cc)
OBJS=()
for s in "${SRCS[@]}"; do
  o="$OUT/obj/$(basename "$s" .cc).o"
  OBJS+=("$o")
  "${CXX[@]}" -c "$s" -o "$o" &
  while [ "$(jobs -r | wc -l)" -ge 2 ]; do sleep 0.2; done
done
wait
LIBS=$(grep -A8 "^build tests/inference_svc/engine/int8_memory_test:" "$BASE/build.ninja" |
       sed -n 's/^ *LINK_LIBRARIES = //p' | head -1)
[ -n "$LIBS" ] || { echo "run_emulated: no link line in $BASE/build.ninja" >&2; exit 2; }
LIBS=$(sed -E "s#(^| )(inference_svc|kernels|common|proto)/#\1$BASE/\2/#g" <<<"$LIBS")
# shellcheck disable=SC2086
"${CXX[@]}" -o "$OUT/cuda_emu_test" "${OBJS[@]}" -Wl,--allow-multiple-definition $LIBS
echo "run_emulated: $OUT/cuda_emu_test --gtest_filter=$FILTER"
"$OUT/cuda_emu_test" --gtest_filter="$FILTER"
