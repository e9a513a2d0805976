#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang) and runs each for a bounded time on a copy of
# its seed corpus (FUZZ_SECONDS each, default 20). A crash, leak or sanitizer report fails.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
SECONDS_EACH=${FUZZ_SECONDS:-20}
cmake -S fuzz -B "$FUZZ_DIR" -DCMAKE_C_COMPILER=clang -DDLPG_WERROR=ON > /dev/null
cmake --build "$FUZZ_DIR" -j"$(nproc)"
for t in store_frames dlpack; do
  work=$(mktemp -d)
  cp fuzz/corpus/$t/* "$work"/
  echo "ci/fuzz.sh: fuzz_$t for ${SECONDS_EACH} s"
  status=0
  dict=()
  [ -f "fuzz/$t.dict" ] && dict=(-dict="$PWD/fuzz/$t.dict")
  (cd "$work" && "$OLDPWD/$FUZZ_DIR/fuzz_$t" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 \
     -print_final_stats=1 "${dict[@]}" "$work" > "$work/log" 2>&1) || status=$?
  if [ "$status" != 0 ]; then
    tail -40 "$work/log"
    echo "ci/fuzz.sh: fuzz_$t found a failure (input above, base64)"
    exit 1
  fi
  grep -E "^(Done|stat::number_of_executed_units)" "$work/log" || true
  rm -rf "$work"
done
