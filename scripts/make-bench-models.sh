#!/usr/bin/env bash
# Makes the bench-shaped models of issue 16, if missing, and prints their paths
# (one a line: the Q4_K_M file, then the Q8_0 file).
#
# Usage: scripts/make-bench-models.sh [DIR]    (default DIR: bench-models/)
#
# The model has Qwen3-30B-A3B's layer shapes, 4 of its 48 layers: embedding
# 2048, 128 experts of FFN width 768, 8 used per token, 32 query heads and 4
# key/value heads of 128 (about 2.5 B parameters). Our `llama-run --synth`
# writes it as F16 (DIR/q3-4l-f16.gguf, ~4.7 GiB, about 2 minutes), then
# llama.cpp's own llama-quantize makes DIR/q3-4l-Q4_K_M.gguf (~1.4 GiB) and
# DIR/q3-4l-Q8_0.gguf (~2.5 GiB), so that both engines read files quantized
# the same way (Q4_K_M: about 6 minutes on 2 loaded cores). Existing files are
# kept; delete one to remake it. The F16 file is kept too (pass KEEP_F16=0 to
# remove it once both quantized files exist).
#
# Environment:
#   LLAMA_RUN=target/release/llama-run   (built with `cargo build --release -p tools`)
#   LLAMA_CPP_DIR=...   folder with llama.cpp's llama-quantize; default: what
#                       ../shared/tools/llama-cpp-ref.sh prints
#   KEEP_F16=1
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
DIR=${1:-bench-models}
LLAMA_RUN=${LLAMA_RUN:-target/release/llama-run}
KEEP_F16=${KEEP_F16:-1}
mkdir -p "$DIR"
f16=$DIR/q3-4l-f16.gguf
q4=$DIR/q3-4l-Q4_K_M.gguf
q8=$DIR/q3-4l-Q8_0.gguf
if [ ! -f "$q4" ] || [ ! -f "$q8" ]; then
  if [ -z "${LLAMA_CPP_DIR:-}" ]; then
    ref=${LLAMA_CPP_REF:-../shared/tools/llama-cpp-ref.sh}
    [ -x "$ref" ] || { echo "make-bench-models: no $ref; set LLAMA_CPP_DIR" >&2; exit 2; }
    LLAMA_CPP_DIR=$("$ref")
  fi
  quantize=$LLAMA_CPP_DIR/llama-quantize
  [ -x "$quantize" ] || { echo "make-bench-models: no llama-quantize in '$LLAMA_CPP_DIR'" >&2; exit 2; }
  if [ ! -f "$f16" ]; then
    if [ ! -x "$LLAMA_RUN" ]; then
      echo "make-bench-models: building llama-run" >&2
      cargo build --release -p tools --bin llama-run >&2
    fi
    echo "make-bench-models: synthesizing $f16" >&2
    "$LLAMA_RUN" --synth "$f16.part" --layers 4 --experts 128 --used 8 --embd 2048 --ff 768 \
      --heads 32 --heads-kv 4 --head-dim 128 --type F16 >&2
    mv "$f16.part" "$f16"
  fi
  for pair in "$q4:Q4_K_M" "$q8:Q8_0"; do
    out=${pair%:*} ty=${pair##*:}
    [ -f "$out" ] && continue
    echo "make-bench-models: quantizing $out with llama.cpp's llama-quantize" >&2
    "$quantize" "$f16" "$out.part" "$ty" >"$DIR/quantize-$ty.log" 2>&1 ||
      { tail -5 "$DIR/quantize-$ty.log" >&2; echo "make-bench-models: llama-quantize $ty failed" >&2; exit 1; }
    mv "$out.part" "$out"
  done
  [ "$KEEP_F16" = 1 ] || rm -f "$f16"
fi
echo "$q4"
echo "$q8"
