#!/usr/bin/env bash
# GPT-2's BPE ranks as .cache/gpt2.tiktoken, for air-gapped machines and CI, which cannot reach the
# server tiktoken downloads them from. The openai-whisper sdist on PyPI carries the same ranks as
# whisper/assets/gpt2.tiktoken; only that file is extracted: the package is never installed (it
# would pull in heavy dependencies). Use it with: --encoding .cache/gpt2.tiktoken
set -euo pipefail
cd "$(dirname "$0")/.."
out=.cache/gpt2.tiktoken
sha256=306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930
if [ -s "$out" ]; then
    echo "$out"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python -m pip download --quiet --no-deps --no-binary :all: --dest "$tmp" openai-whisper >&2
sdist=$(ls "$tmp"/openai[-_]whisper-*.tar.gz)
member=$(tar -tzf "$sdist" | grep '/whisper/assets/gpt2.tiktoken$')  # no grep -m: tar would die of SIGPIPE
mkdir -p .cache
tar -xzOf "$sdist" "$member" > "$tmp/gpt2.tiktoken"
# the file whose ranks match tiktoken's gpt2 ("hello world" -> [31373, 995]); refuse any other
echo "$sha256  $tmp/gpt2.tiktoken" | sha256sum --check --quiet >&2
mv "$tmp/gpt2.tiktoken" "$out"
echo "$out"
