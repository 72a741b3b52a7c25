#!/usr/bin/env bash
# Proves the trimmed llama.cpp tree of the GPU check's pack is complete:
# CMake's configure and generate steps with the CUDA backend on, against the
# CUDA 13 toolkit from PyPI's wheels (nvidia-cuda-nvcc, -runtime, -cccl,
# -crt, nvidia-nvvm, nvidia-cublas; about 840 MiB, installed once into
# ~/.cache/ggml-rs/cuda13-toolkit). Needs no GPU. Compiling is not attempted.
#
# Usage: scripts/llama-cpp-cuda-configure.sh [TRIMMED_TREE]
#   default: trims ~/.cache/llama-cpp-ref/.../vendor/llama.cpp (what
#   ../shared/tools/llama-cpp-ref.sh unpacks) into a temporary folder.
# The wheels ship no unversioned library links, no lib64 folder and no driver
# stub (a toolkit's lib64/stubs/libcuda.so): the script adds them in the
# cache folder (the stub is an empty library, enough for CMake to resolve
# CUDA::cuda_driver; nothing is linked against it here).
# Prints "configured: ..." and exits 0, or prints CMake's errors and exits 1;
# exits 2 (with the reason) when the wheels or the source cannot be had.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${GGML_CUDA_WHEEL_CACHE:-$HOME/.cache/ggml-rs}/cuda13-toolkit
T=$CACHE/nvidia/cu13
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ ! -x "$T/bin/nvcc" ]; then
    python3 -m pip install -q --no-deps --only-binary=:all: --disable-pip-version-check --target "$CACHE" \
        "nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-cccl==13.0.*" \
        "nvidia-cublas==13.0.*" "nvidia-cuda-crt==13.0.*" "nvidia-nvvm==13.0.*" >"$work/pip.log" 2>&1 ||
        { echo "skipped: cannot install the CUDA 13 wheels: $(grep -m1 ERROR "$work/pip.log" || tail -1 "$work/pip.log")"; exit 2; }
fi
# a toolkit's layout: lib64, unversioned links, the driver stub
ln -sfn lib "$T/lib64"
for l in cudart cublas cublasLt; do
    [ -e "$T/lib/lib$l.so.13" ] && ln -sf "lib$l.so.13" "$T/lib/lib$l.so"
done
if [ ! -e "$T/lib/stubs/libcuda.so" ]; then
    mkdir -p "$T/lib/stubs"
    echo 'void ggml_rs_cuda_driver_stub(void) {}' | cc -shared -fPIC -x c -o "$T/lib/stubs/libcuda.so" -
fi
tree=${1:-}
if [ -z "$tree" ]; then
    src=$(ls -d "$HOME"/.cache/llama-cpp-ref/llama_cpp_python-*/vendor/llama.cpp 2>/dev/null | head -1)
    [ -n "$src" ] || { echo "skipped: no llama.cpp source (run ../shared/tools/llama-cpp-ref.sh)"; exit 2; }
    tree=$work/llama.cpp
    scripts/llama-cpp-trim.sh "$src" "$tree" >/dev/null
fi
if cmake -S "$tree" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_CUDA_COMPILER="$T/bin/nvcc" -DCUDAToolkit_ROOT="$T" >"$work/cmake.log" 2>&1; then
    echo "configured: $tree with CUDA $("$T/bin/nvcc" --version | grep -o 'release [0-9.]*') ($(grep -m1 'Found CUDAToolkit' "$work/cmake.log" | sed 's/^-- //'))"
else
    grep -B2 -A8 'CMake Error' "$work/cmake.log" | head -60
    exit 1
fi
