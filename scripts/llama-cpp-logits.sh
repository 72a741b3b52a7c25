#!/usr/bin/env bash
# Writes a model fixture (logits, greedy tokens, teacher-forced logits, as
# ../shared/fixtures/README.md defines them) with llama.cpp 0.5.0-dev itself,
# for configurations the shared fixtures do not cover (flash attention on,
# another ubatch size). With FLASH_ATTN=0 and UBATCH=512 it reproduces the
# shared fixtures bit for bit.
#
# Usage: scripts/llama-cpp-logits.sh MODEL_PREFIX OUT_PREFIX
#   MODEL_PREFIX: a fixture model's path without extension, such as
#                 ../shared/fixtures/models/NAME (NAME.gguf, NAME.tokens read)
#   OUT_PREFIX:   writes OUT_PREFIX.logits, OUT_PREFIX.gen, OUT_PREFIX.genlogits
# Environment: FLASH_ATTN=1  UBATCH=512  KV_TYPE=f16|q8_0|q4_0 (K and V cache;
#   llama.cpp rotates a quantized cache unless LLAMA_ATTN_ROT_DISABLE=1)
#   LLAMA_CPP_DIR=...  llama.cpp's build/bin; default: what
#                      ../shared/tools/llama-cpp-ref.sh prints (it builds
#                      llama.cpp 0.5.0-dev the first time, ~10 min on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
bin=${LLAMA_CPP_DIR:-$(../shared/tools/llama-cpp-ref.sh)}
src=$(cd "$bin/../.." && pwd)
exe=${TMPDIR:-/tmp}/llama-cpp-fixture
c++ -O2 -std=c++17 scripts/llama-cpp-logits/fixture.cpp -I"$src/include" -I"$src/ggml/include" \
  -L"$bin" -lllama -lggml -lggml-base -Wl,-rpath,"$bin" -o "$exe"
"$exe" "$1" "$2" "${FLASH_ATTN:-1}" "${UBATCH:-512}" 2>/dev/null
echo "wrote $2.logits $2.gen $2.genlogits"
