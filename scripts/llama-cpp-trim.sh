#!/usr/bin/env bash
# Trims llama.cpp's source to what building `llama-bench` needs (the CPU and
# CUDA backends, llama, common, the vendored headers), for the GPU check's
# pack: the same-card baseline is built from it on the GPU machine.
#
# Usage: scripts/llama-cpp-trim.sh SRC DEST
#   SRC:  a llama.cpp tree (../shared/tools/llama-cpp-ref.sh unpacks the
#         0.5.0-dev one under ~/.cache/llama-cpp-ref/.../vendor/llama.cpp)
#   DEST: the folder to write (replaced)
# Left out: models, tests, examples, docs, media, the other backends
# (Metal, Vulkan, SYCL, ...), the other tools, the web UI, Python.
# tools/CMakeLists.txt is rewritten to add llama-bench alone; configure with
#   -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
#   -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
set -euo pipefail
src=${1:?usage: llama-cpp-trim.sh SRC DEST}
dest=${2:?usage: llama-cpp-trim.sh SRC DEST}
[ -f "$src/CMakeLists.txt" ] && [ -d "$src/ggml/src/ggml-cuda" ] ||
    { echo "llama-cpp-trim: $src is not a llama.cpp tree (no CMakeLists.txt or ggml/src/ggml-cuda)" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$dest"
copy() { # copy PATH... (relative to src), keeping the layout
    for p in "$@"; do
        mkdir -p "$dest/$(dirname "$p")"
        cp -a "$src/$p" "$dest/$p"
    done
}
copy CMakeLists.txt LICENSE cmake include src common \
    vendor/hash vendor/nlohmann vendor/sheredom vendor/cpp-httplib tools/llama-bench
cat >"$dest/vendor/CMakeLists.txt" <<'EOF'
# trimmed by ggml-rs scripts/llama-cpp-trim.sh: no miniaudio, no stb (mtmd only)
add_subdirectory(hash)
add_subdirectory(nlohmann)
add_subdirectory(sheredom)
if (LLAMA_BUILD_COMMON)
    add_subdirectory(cpp-httplib)
endif()
EOF
# ggml: the core, the CPU and CUDA backends, and what they include
copy ggml/CMakeLists.txt ggml/cmake ggml/include ggml/src/CMakeLists.txt \
    ggml/src/ggml-cpu ggml/src/ggml-cuda
for f in "$src"/ggml/src/*.c "$src"/ggml/src/*.cpp "$src"/ggml/src/*.h "$src"/ggml/src/*.in; do
    [ -e "$f" ] && copy "ggml/src/$(basename "$f")"
done
# the build info reads these when present
for f in "$src"/*.json "$src"/common/build-info.cpp.in; do
    [ -e "$f" ] && [ ! -e "$dest/${f#"$src"/}" ] && copy "${f#"$src"/}"
done
cat >"$dest/tools/CMakeLists.txt" <<'EOF'
# trimmed by ggml-rs scripts/llama-cpp-trim.sh: llama-bench only
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(llama-bench)
EOF
# the CUDA backend's template instances are generated sources: kept; its
# vendored CUTLASS-free MMA headers live in ggml-cuda itself
echo "$dest: $(du -sh "$dest" | cut -f1)"
