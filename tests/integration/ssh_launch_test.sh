#!/usr/bin/env bash
# The ssh backend against a real sshd that this test starts on a loopback port with its own
# host and client keys: a 2 nodes x 1 slot job over ssh to 127.0.0.1 and 127.0.0.2, the
# token passed over stdin (never on a command line), and an unreachable host reported by
# name. sshd is stopped by pid at the end.
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
abs() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
LAUNCH=$(abs "$R/launcher/launch/ds-launch")
WORKER=$(abs "$R/runtime/worker/ds-worker")
AGENT=$(abs "$R/launcher/agent/ds-agent")
DATA=$(abs "$R/tools/ds_data/ds-data")
BASE=$(abs "${TEST_TMPDIR:-$(mktemp -d)}")/ssh
rm -rf "$BASE"; mkdir -p "$BASE/ssh"
export DS_RUNTIME_HOME=$BASE/home
fails=0
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }

if [[ ! -x /usr/sbin/sshd ]]; then echo "FAIL: /usr/sbin/sshd missing (tools/setup.sh installs openssh-server)"; exit 1; fi
mkdir -p /run/sshd && chmod 755 /run/sshd
PORT=$(( 20000 + RANDOM % 20000 ))
S=$BASE/ssh
ssh-keygen -q -t ed25519 -N '' -f "$S/host_ed25519"
ssh-keygen -q -t ed25519 -N '' -f "$S/client_ed25519"
cp "$S/client_ed25519.pub" "$S/authorized_keys"; chmod 600 "$S/authorized_keys"
cat > "$S/sshd_config" <<CFG
Port $PORT
ListenAddress 127.0.0.1
ListenAddress 127.0.0.2
HostKey $S/host_ed25519
PidFile $S/sshd.pid
AuthorizedKeysFile $S/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
CFG
/usr/sbin/sshd -f "$S/sshd_config" -E "$S/sshd.log" || { echo "FAIL: sshd did not start"; cat "$S/sshd.log"; exit 1; }
trap 'kill "$(cat "$S/sshd.pid" 2>/dev/null)" 2>/dev/null' EXIT
cat > "$S/ssh_config" <<CFG
Host 127.0.0.*
  User root
  IdentityFile $S/client_ed25519
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile $S/known_hosts
  LogLevel ERROR
CFG
for i in $(seq 50); do ssh -F "$S/ssh_config" -p "$PORT" -o BatchMode=yes 127.0.0.2 true 2>/dev/null && break; sleep 0.1; done

"$DATA" addition --digits 2 --train_examples 2000 --val_examples 100 --output_dir "$BASE/data" >/dev/null 2>&1
cat > "$BASE/job.yaml" <<YAML
train_micro_batch_size_per_gpu: 8
optimizer: {type: AdamW, params: {lr: 0.003}}
model: {family: gpt2, n_layer: 1, n_embd: 32, n_head: 2, vocab_size: 16, max_seq_len: 10}
data: {train: $BASE/data/train.tok, seq_len: 10}
training: {train_iters: 20}
device: {threads: 1}
YAML
printf '127.0.0.1 slots=1\n127.0.0.2 slots=1\n' > "$BASE/hosts"

timeout 120 "$LAUNCH" "$BASE/job.yaml" --hostfile "$BASE/hosts" --launcher ssh --ssh_port "$PORT" \
  --ssh_config "$S/ssh_config" --worker "$WORKER" --agent "$AGENT" --heartbeat 0.5 > "$BASE/out" 2>&1
rc=$?
[[ $rc == 0 ]] && pass "2-node job over ssh exits 0" || { fail "ssh job exit $rc"; tail -20 "$BASE/out"; }
grep -q "^\[rank 1\] done: 20 steps" "$BASE/out" && pass "rank 1 ran through ssh" || fail "no rank 1 output"
token=$(cat "$(cat "$DS_RUNTIME_HOME/current")/token")
if grep -q "$token" "$S/sshd.log" "$BASE/out"; then fail "the token appears in a log"; else pass "token not on any command line or log"; fi

# Mutual TLS through ssh: the agents get the CA, certificate and key on the ssh channel's stdin
# after the token; the key's text never shows in a log or on a command line.
P=$BASE/pki; mkdir -p "$P"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$P/ca.key" -subj "/CN=ds-test-ca" -days 2 \
  -out "$P/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$P/job.key" -subj "/CN=job" -out "$P/job.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,IP:127.0.0.2\n' > "$P/job.ext"
openssl x509 -req -in "$P/job.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -days 2 \
  -extfile "$P/job.ext" -out "$P/job.crt" 2>/dev/null
timeout 120 "$LAUNCH" "$BASE/job.yaml" --hostfile "$BASE/hosts" --launcher ssh --ssh_port "$PORT" \
  --ssh_config "$S/ssh_config" --worker "$WORKER" --agent "$AGENT" --heartbeat 0.5 \
  --tls_cert "$P/job.crt" --tls_key "$P/job.key" --tls_ca "$P/ca.crt" > "$BASE/out_tls" 2>&1
rc=$?
[[ $rc == 0 ]] && grep -q "^\[rank 1\] done: 20 steps" "$BASE/out_tls" \
  && pass "2-node job over ssh with mutual TLS (certificates sent on the ssh channel)" \
  || { fail "ssh + TLS job exit $rc"; tail -20 "$BASE/out_tls"; }
keyline=$(sed -n 2p "$P/job.key")
if grep -qF -- "$keyline" "$S/sshd.log" "$BASE/out_tls"; then fail "the TLS key appears in a log"
else pass "TLS key not on any command line or log"; fi

printf '127.0.0.1 slots=1\n127.0.0.3 slots=1\n' > "$BASE/unreachable"
timeout 60 "$LAUNCH" "$BASE/job.yaml" --hostfile "$BASE/unreachable" --launcher ssh --ssh_port "$PORT" \
  --ssh_config "$S/ssh_config" --worker "$WORKER" --agent "$AGENT" --heartbeat 0.5 > "$BASE/out2" 2>&1
rc=$?
[[ $rc != 0 ]] && grep -q "agent for 127.0.0.3 failed before joining" "$BASE/out2" \
  && pass "unreachable host reported by name" || { fail "unreachable host (exit $rc)"; tail -8 "$BASE/out2"; }
sleep 1
[[ -z $(pgrep -f "$BASE/job.yaml") ]] && pass "no process left" || { fail "left: $(pgrep -af "$BASE/job.yaml")"; pkill -9 -f "$BASE/job.yaml"; }

echo "ssh_launch_test: $fails failure(s)"
[[ $fails -eq 0 ]]
