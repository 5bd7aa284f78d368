#!/usr/bin/env bash
# Mutual TLS end to end through ds-launch, with certificates this test makes (openssl): a CA, a
# certificate for 127.0.0.1 / 127.0.0.2 that the coordinator and every client present, and a
# second CA's client certificate. A 2-node job trains to success over TLS: the agents (which get
# the CA, certificate and key on stdin after the token, never from a path on their node) and
# the workers (progress reports, the KV store that bootstraps their group) all connect with it.
# While a second job runs, `ds-launch status` works with the job's certificate (from the job
# directory), and is refused as a plaintext client, as a client without a certificate and as a
# client whose certificate another CA signed. The agents' private copies are gone after the job.
# Half-given TLS flags are refused before anything starts.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
WORKER=$R/runtime/worker/ds-worker
AGENT=$R/launcher/agent/ds-agent
DATA=$R/tools/ds_data/ds-data
BASE=${TEST_TMPDIR:-$(mktemp -d)}/tls
rm -rf "$BASE"; mkdir -p "$BASE/pki"
export DS_RUNTIME_HOME=$BASE/home
export TMPDIR=$BASE/tmp; mkdir -p "$TMPDIR"
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }
command -v openssl >/dev/null || { echo "tls_test: openssl is needed (tools/setup.sh installs it)"; exit 1; }
"$DATA" addition --digits 2 --train_examples 4000 --val_examples 100 --output_dir "$BASE/data" >/dev/null 2>&1
printf '127.0.0.1 slots=1\n127.0.0.2 slots=1\n' > "$BASE/hosts"

# PKI: ca signs job (server and client use: SANs for both loopback nodes); rogue signs intruder.
P=$BASE/pki
cert() {  # cert CA NAME SUBJECT: NAME.key, NAME.crt signed by CA
  openssl req -newkey rsa:2048 -nodes -keyout "$P/$2.key" -subj "/CN=$3" -out "$P/$2.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,IP:127.0.0.2,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' > "$P/$2.ext"
  openssl x509 -req -in "$P/$2.csr" -CA "$P/$1.crt" -CAkey "$P/$1.key" -CAcreateserial -days 2 \
    -extfile "$P/$2.ext" -out "$P/$2.crt" 2>/dev/null
}
for ca in ca rogue; do
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$P/$ca.key" -subj "/CN=ds-test-$ca" -days 2 \
    -out "$P/$ca.crt" 2>/dev/null
done
cert ca job "ds-runtime job"
cert rogue intruder "intruder"
[[ -s $P/job.crt && -s $P/intruder.crt ]] || { echo "tls_test: openssl could not make the certificates"; exit 1; }
TLS=(--tls_cert "$P/job.crt" --tls_key "$P/job.key" --tls_ca "$P/ca.crt")

job() {  # job FILE STEPS
  cat > "$1" <<YAML
train_micro_batch_size_per_gpu: 8
optimizer: {type: AdamW, params: {lr: 0.003}}
model: {family: gpt2, n_layer: 1, n_embd: 32, n_head: 2, vocab_size: 16, max_seq_len: 10}
data: {train: $BASE/data/train.tok, seq_len: 10}
training: {train_iters: $2}
monitor: {log_interval: 10}
device: {threads: 1}
YAML
}

# 1. A 2-node job to the end over TLS.
job "$BASE/short.yaml" 30
if timeout 120 "$LAUNCH" "$BASE/short.yaml" --hostfile "$BASE/hosts" --worker "$WORKER" \
    --agent "$AGENT" --heartbeat 0.5 "${TLS[@]}" > "$BASE/out" 2>&1; then
  pass "2-node job over mutual TLS succeeds"
else fail "2-node job over TLS: exit $?"; tail -15 "$BASE/out"; fi
grep -q "TLS" "$BASE/out" && pass "the coordinator says it serves TLS" || fail "no TLS line"
grep -q "\[rank 1\] done: 30 steps" "$BASE/out" && pass "rank 1 (second node) trained to the end" \
  || fail "rank 1 did not finish"
left=$(find "$TMPDIR" -maxdepth 1 -name 'ds-tls-*' | wc -l)
[[ $left == 0 ]] && pass "the agents removed their private TLS copies" || fail "$left ds-tls-* left in TMPDIR"

# 2. A running job: its own status works; the wrong clients are refused.
job "$BASE/long.yaml" 100000
"$LAUNCH" "$BASE/long.yaml" --hostfile "$BASE/hosts" --worker "$WORKER" --agent "$AGENT" \
  --heartbeat 0.5 --grace 1 --detach "${TLS[@]}" > "$BASE/long.out" 2>&1
progress() { "$LAUNCH" status 2>/dev/null | grep -qE "RUNNING"; }
end=$((SECONDS + 60)); until progress || ((SECONDS > end)); do sleep 0.2; done
CUR=$(cat "$DS_RUNTIME_HOME/current")
ADDR=$(cat "$CUR/coordinator")
# Workers report progress over TLS: both ranks' steps reach the coordinator.
sleep 2
status=$("$LAUNCH" status --json 2>&1)
steps=$(grep -o '"step": *[0-9]*' <<<"$status" | grep -cv '"step": *0$')
[[ $steps -ge 2 ]] && pass "both workers' progress reports reach the coordinator over TLS" \
  || { fail "workers' progress over TLS: $steps rank(s) with steps"; echo "$status" | head -30; }
"$LAUNCH" status > "$BASE/status.txt" 2>&1 && pass "ds-launch status with the job's certificate" \
  || { fail "status with the job's certificate"; cat "$BASE/status.txt"; }
refused() {  # refused NAME ARGS...: the coordinator answers nothing (the handshake fails)
  local name=$1 out rc; shift
  out=$(timeout 20 "$LAUNCH" status --coordinator "$ADDR" --token_file "$CUR/token" "$@" 2>&1); rc=$?
  if [[ $rc -ne 0 ]] && grep -q "UNAVAILABLE" <<<"$out" && ! grep -q RUNNING <<<"$out"; then
    pass "$name refused: $(head -1 <<<"$out" | cut -c1-120)"
  else fail "$name: exit $rc: $out"; fi
}
refused "a plaintext client"
refused "a client without a certificate" --tls_ca "$P/ca.crt"
refused "a client with another CA's certificate" --tls_ca "$P/ca.crt" --tls_cert "$P/intruder.crt" \
  --tls_key "$P/intruder.key"
"$LAUNCH" status --coordinator "$ADDR" --token_file "$CUR/token" --tls_ca "$P/ca.crt" \
  --tls_cert "$P/job.crt" --tls_key "$P/job.key" >/dev/null 2>&1 \
  && pass "an explicit client with the CA's certificate is served" || fail "explicit TLS client"
"$LAUNCH" stop >/dev/null 2>&1 || fail "ds-launch stop over TLS"
end=$((SECONDS + 20))
while pgrep -f "$BASE/long.yaml" >/dev/null && ((SECONDS < end)); do sleep 0.2; done
pgrep -f "$BASE/long.yaml" >/dev/null && { fail "the stopped job left processes"; pkill -9 -f "$BASE/long.yaml"; } \
  || pass "ds-launch stop over TLS ended the job"

# 3. Half-given TLS flags: refused before start.
out=$("$LAUNCH" "$BASE/short.yaml" --hostfile "$BASE/hosts" --worker "$WORKER" --agent "$AGENT" \
  --tls_cert "$P/job.crt" --tls_key "$P/job.key" 2>&1); rc=$?
[[ $rc == 2 ]] && grep -q "go together" <<<"$out" && pass "--tls_cert without --tls_ca refused" \
  || fail "half TLS flags: exit $rc: $out"
out=$("$LAUNCH" "$BASE/short.yaml" --hostfile "$BASE/hosts" --worker "$WORKER" --agent "$AGENT" \
  --tls_cert "$P/job.csr" --tls_key "$P/job.key" --tls_ca "$P/job.ext" 2>&1); rc=$?
[[ $rc == 2 ]] && grep -q "job.ext holds no PEM block" <<<"$out" && pass "a CA file that is not PEM refused by name" \
  || fail "non-PEM CA: exit $rc: $out"

echo "tls_test: $fails failure(s)"
[[ $fails -eq 0 ]]
