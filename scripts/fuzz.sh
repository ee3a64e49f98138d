#!/usr/bin/env sh
# Runs every fuzz target (fuzz/fuzz_targets) for SECONDS each (default 180) on its corpus,
# seeded from the vendored recorded cases, with the request dictionary. Crashes are left in
# fuzz/artifacts/<target>/ and make the script fail; replay one with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run <target> fuzz/artifacts/<target>/<file>
# cargo-fuzz is installed on first use. RUSTC_BOOTSTRAP lets the stable toolchain take the
# sanitizer flags cargo fuzz passes (AddressSanitizer: the arriving-body reader has unsafe
# code), so no nightly toolchain is needed.
set -eu
cd "$(dirname "$0")/.."
seconds=${1:-180}
targets=${FUZZ_TARGETS:-"body_readers request_path request_structured config affinity"}
export RUSTC_BOOTSTRAP=1
command -v cargo-fuzz >/dev/null || cargo install --locked --quiet cargo-fuzz
python3 fuzz/seed.py
for target in $targets; do
  mkdir -p "fuzz/corpus/$target"
  echo "== fuzz $target for ${seconds}s"
  cargo fuzz run --release "$target" -- \
    -dict="$PWD/fuzz/dict/request.dict" -max_total_time="$seconds" -max_len=262144 -timeout=10 \
    -rss_limit_mb=4096 -print_final_stats=1 2>&1 | grep -E '^(stat::|==|SUMMARY|Done|#[0-9]+ +DONE)|panicked|crash|Test unit' || true
  # Each pattern on its own: `ls` of both fails whenever one matches nothing, which let a
  # crash alone through.
  for found in "fuzz/artifacts/$target"/crash-* "fuzz/artifacts/$target"/timeout-*; do
    if [ -e "$found" ]; then
      echo "fuzz $target: a crash or timeout, in $found"; exit 1
    fi
  done
done
