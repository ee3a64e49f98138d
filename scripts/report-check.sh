#!/usr/bin/env bash
# `make report-check`: the `dapi simulate --report` page in a real headless browser.
#
# Generates a two-config report (a generated datacenter, a package mix), loads it in
# headless Chromium with logging on and name resolution disabled, and fails if the page
# logs anything to the console (errors, failed loads) or lacks one of its charts; then
# writes a screenshot. A canary page that does log an error is loaded first, so the check
# is known to catch one. Outputs in target/report-check/ (REPORT_CHECK_DIR to change).
#
# Needs Chromium (Debian's `chromium`): installed with apt-get when missing and running as
# root under CI=true or with --install; otherwise the script says how.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${REPORT_CHECK_DIR:-target/report-check}
mkdir -p "$out"
out=$(cd "$out" && pwd)

browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  if [ "${CI:-}" = "true" ] || [ "${1:-}" = "--install" ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    browser=$(command -v chromium)
  else
    echo "report-check: Chromium is not installed: apt-get install -y chromium (or run with --install)" >&2
    exit 1
  fi
fi
[ -x target/release/dapi ] || cargo build --release

# Loads file $1 headless; the DOM to $2, the browser's log to $3.
load() {
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --no-first-run \
    --host-resolver-rules='MAP * ~NOTFOUND' --enable-logging=stderr --v=0 \
    --dump-dom "file://$1" >"$2" 2>"$3"
}
# The console lines of a log (Chromium logs every console message as INFO:CONSOLE).
console_lines() { grep -E ':CONSOLE[:(]|Uncaught' "$1" || true; }

# The canary: a page that logs an error must be caught.
cat >"$out/canary.html" <<'HTML'
<!DOCTYPE html><html><body><p>canary</p><script>console.error("report-check canary")</script></body></html>
HTML
load "$out/canary.html" "$out/canary.dom" "$out/canary.log"
if ! console_lines "$out/canary.log" | grep -q "report-check canary"; then
  echo "report-check: FAILED: the canary's console error was not seen; the check cannot see errors" >&2
  exit 1
fi

# The report: two configs on one workload.
cat >"$out/mix.json" <<'JSON'
{"packages": [{"name": "small", "max_physical_memory": 1024, "cpu_cap": 100, "quota": 25600},
              {"name": "medium", "max_physical_memory": 4096, "cpu_cap": 200, "quota": 102400},
              {"name": "large", "max_physical_memory": 16384, "cpu_cap": 400, "quota": 409600}],
 "weights": [6, 3, 1], "count": 2500, "owners": 60}
JSON
echo '{"defaults": {"weight_unreserved_ram": -2}}' >"$out/fill-first.json"
target/release/dapi simulate --racks 8 --servers-per-rack 12 --ram 128G --seed 7 \
  --vs "$out/fill-first.json" --report "$out/report.html" "$out/mix.json" >"$out/summary.txt"

load "$out/report.html" "$out/report.dom" "$out/report.log"
errors=$(console_lines "$out/report.log")
if [ -n "$errors" ]; then
  echo "report-check: FAILED: the page logged to the console:" >&2
  echo "$errors" >&2
  exit 1
fi
for id in summary histogram-ram histogram-disk histogram-cpu timeline racks-0 racks-1 moved; do
  grep -q "id=\"$id\"" "$out/report.dom" || { echo "report-check: FAILED: the rendered page has no #$id" >&2; exit 1; }
done

rm -f "$out/report.png"
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --no-first-run --hide-scrollbars \
  --host-resolver-rules='MAP * ~NOTFOUND' --window-size=1280,4000 \
  --screenshot="$out/report.png" "file://$out/report.html" >/dev/null 2>&1
size=$(stat -c %s "$out/report.png" 2>/dev/null || echo 0)
if [ "$size" -lt 10000 ]; then
  echo "report-check: FAILED: no screenshot (or an empty one: $size bytes)" >&2
  exit 1
fi
echo "report-check: no console output, every chart rendered; screenshot $out/report.png ($size bytes)"
echo "report-check: 1 passed, 0 failed"
