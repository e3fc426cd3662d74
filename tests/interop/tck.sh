#!/usr/bin/env bash
# Runs the official A2A TCK (a2aproject/a2a-tck) against a real door.
#
#   tests/interop/tck.sh TCK_DIR [PYTHON]
#
# TCK_DIR is a snapshot of the TCK's repository (it is not published as a package, and none of
# it is kept here); PYTHON is an interpreter with the TCK's requirements installed (default:
# TCK_DIR/.venv/bin/python, else python3). MUR names the binary (default target/debug/mur).
#
# Two lines of the TCK are told apart by their layout. Of its `main` branch (tests/mandatory/)
# this runs the mandatory and capabilities categories. Of its `1.0-dev` branch
# (tests/compatibility/), which has no categories, it runs what its runner runs by default,
# every level (MUST, SHOULD, MAY), on JSON-RPC, the one binding the door serves.
#
# The system under test is a model capsule on an authenticating door whose scripted provider
# (tests/interop/tck_provider.py, 127.0.0.1) answers each turn after TCK_DELAY seconds (1.2), so
# a task is seen working before it completes. Everything it makes lives in a temporary HOME that
# is removed at the end; only loopback addresses are used. The failures and pytest's summary
# lines are printed, then one line "tck: N passed, N failed" for the whole run; the logs and
# reports stay in TCK_DIR/reports/ (each main-branch log ends with its skipped tests and why).
set -euo pipefail

tck=${1:?usage: tests/interop/tck.sh TCK_DIR [PYTHON]}
tck=$(cd "$tck" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
python=${2:-}
case $python in */*) python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python") ;; esac
if [ -z "$python" ]; then
  if [ -x "$tck/.venv/bin/python" ]; then python=$tck/.venv/bin/python; else python=python3; fi
fi
mur=${MUR:-$repo/target/debug/mur}
delay=${TCK_DELAY:-1.2}

home=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$home"
}
trap cleanup EXIT

# The provider prints its port first.
coproc PROVIDER { exec python3 "$repo/tests/interop/tck_provider.py" "$delay"; }
pids+=("$PROVIDER_PID")
read -r port <&"${PROVIDER[0]}"

mkdir -p "$home/src/tck" "$home/work"
cat >"$home/src/tck/murmur.yaml" <<EOF
name: tck
version: 0.1.0
inference:
  provider: openai
  endpoint: http://127.0.0.1:$port
  model: scripted
  api_key: \${TCK_PROVIDER_KEY}
  system_prompt: You answer briefly.
lifecycle:
  task_acceptance: queue
  queue_depth: 64
  after_task: sleep
exports:
  input_modes: ['*/*']
network:
  authentication:
    scheme: bearer
EOF

export HOME=$home
cd "$home"
zip=$("$mur" build "$home/src/tck" | sed 's/.*: //')
"$mur" install -g "$zip" >/dev/null

TCK_PROVIDER_KEY=scripted "$mur" run --capsule local/tck --capsule-version 0.1.0 \
  --json --readiness-tokens >"$home/door.out" 2>"$home/door.err" &
pids+=("$!")
for _ in $(seq 300); do
  [ -s "$home/door.out" ] && break
  sleep 0.1
done
if [ ! -s "$home/door.out" ]; then
  echo "the door did not become ready:" >&2
  cat "$home/door.err" >&2
  exit 1
fi
ready=$(head -n1 "$home/door.out")
url=$("$python" -c 'import json,sys; print("http://" + json.loads(sys.argv[1])["url"].replace("localhost", "127.0.0.1", 1))' "$ready")
token=$("$python" -c 'import json,sys; print(json.loads(sys.argv[1])["tokens"]["operator"])' "$ready")

cd "$tck"
mkdir -p reports

if [ -d tests/compatibility ]; then
  # The 1.0-dev line sends `A2A-Version: 1.0` itself but has no way to authenticate, so the
  # plugin tck_headers.py gives its HTTP clients the operator token from A2A_AUTH_HEADERS. Its
  # webhook receiver is reached on loopback.
  A2A_AUTH_HEADERS=$("$python" -c 'import json,sys; print(json.dumps({"Authorization": "Bearer " + sys.argv[1]}))' "$token")
  export A2A_AUTH_HEADERS
  # Its own runner; its reports (compatibility.json and .html, junitreport.xml) go to reports/.
  PYTHONPATH="$repo/tests/interop${PYTHONPATH:+:$PYTHONPATH}" "$python" run_tck.py \
    --sut-host "$url" --transport jsonrpc -- -p tck_headers -p no:cacheprovider \
    --webhook-host=127.0.0.1 -rfE >reports/tck-dev.log 2>&1 || true
  grep -E '^(FAILED|ERROR) tests/|(passed|failed).* in [0-9.]+s' reports/tck-dev.log || true
  "$python" -c '
import sys, xml.etree.ElementTree as et
s = et.parse(sys.argv[1]).getroot()
s = s if s.tag == "testsuite" else s[0]
failed = int(s.get("failures", 0)) + int(s.get("errors", 0))
passed = int(s.get("tests", 0)) - failed - int(s.get("skipped", 0))
print(f"tck: {passed} passed, {failed} failed")' reports/junitreport.xml
  exit 0
fi

# The token reaches the TCK only through its own process environment, as its README asks,
# beside `A2A-Version: 1.0`, which this snapshot of the TCK (written for v1.0) does not send by
# itself: without it the door must read the request as v0.3 (§3.2.6) and refuses it (-32009).
A2A_AUTH_HEADERS=$("$python" -c 'import json,sys; print(json.dumps({"Authorization": "Bearer " + sys.argv[1], "A2A-Version": "1.0"}))' "$token")
export A2A_AUTH_HEADERS
passed=0
failed=0
# The selections run_tck.py makes for --category mandatory --transports jsonrpc and for
# --category capabilities, run by pytest directly for a JSON report.
run() {
  local name=$1
  shift
  "$python" -m pytest "$@" --sut-url="$url" --test-scope=all --tb=short -q -rs -p no:cacheprovider \
    --json-report --json-report-file="reports/tck-$name.json" >"reports/tck-$name.log" 2>&1 || true
  grep -E '^(FAILED|ERROR) |(passed|failed).* in [0-9.]+s' "reports/tck-$name.log" || true
  read -r p f < <("$python" -c '
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
print(s.get("passed", 0), s.get("failed", 0) + s.get("error", 0))' "reports/tck-$name.json")
  passed=$((passed + p))
  failed=$((failed + f))
}
run mandatory tests/mandatory/ -m "mandatory or mandatory_protocol or mandatory_jsonrpc" --transports jsonrpc
run capabilities tests/optional/capabilities/
echo "tck: $passed passed, $failed failed"
