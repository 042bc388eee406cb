#!/usr/bin/env bash
# A throwaway local Ceph cluster for kvfold's RADOS backend: 1 monitor, 3 memstore OSDs, one
# replicated pool (size 3, min_size 2), everything bound to 127.0.0.1, no systemd.
#
#   scripts/ceph_dev.sh start     # boots it (~10-20 s), prints the ceph.conf path last
#   scripts/ceph_dev.sh status    # 0 when the pool answers, 1 otherwise
#   scripts/ceph_dev.sh stop      # stops every process it started (by PID), deletes the dir
#   scripts/ceph_dev.sh kill-osd N / start-osd N   # SIGKILL / restart one OSD (tests)
#
# Environment:
#   CEPH_DEV_DIR    scratch directory (default ${TMPDIR:-/tmp}/kvfold-ceph-dev-$UID)
#   CEPH_DEV_POOL   pool name (default kvfold)
#   CEPH_DEV_AUTH   none (default) or cephx: then the client.admin key is generated into
#                   $CEPH_DEV_DIR/admin.keyring, which clients must be given (ceph.conf does
#                   not name it); `start` prints its path after the conf path
#   CEPH_DEV_OSD_MB memory cap per memstore OSD in MiB (default 512)
# Exit codes: 0 ok, 1 failure (logs under $CEPH_DEV_DIR/log), 3 the Ceph packages are
# missing (ceph-mon, ceph-osd, ceph-common).
set -euo pipefail

DIR="${CEPH_DEV_DIR:-${TMPDIR:-/tmp}/kvfold-ceph-dev-$(id -u)}"
POOL="${CEPH_DEV_POOL:-kvfold}"
AUTH="${CEPH_DEV_AUTH:-none}"
OSD_MB="${CEPH_DEV_OSD_MB:-512}"
NUM_OSDS=3
CONF="$DIR/ceph.conf"
# A running cephx cluster is recognised by its admin keyring.
if [ "${1:-}" != start ] && [ -f "$DIR/admin.keyring" ]; then AUTH=cephx; fi

die() { echo "ceph_dev: $*" >&2; exit 1; }

need_packages() {
  local b
  for b in ceph-mon ceph-osd ceph monmaptool ceph-authtool rados; do
    command -v "$b" >/dev/null 2>&1 || {
      echo "ceph_dev: '$b' not found: apt-get install ceph-mon ceph-osd ceph-common" >&2
      exit 3
    }
  done
}

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# With cephx the admin key is in $DIR/admin.keyring and ceph.conf does not name it: clients
# (kvfold-memory --ceph-keyring, the tests) must be given the file.
auth_args() { [ "$AUTH" = cephx ] && echo "--keyring=$DIR/admin.keyring" || true; }
ceph_cmd() { timeout 30 ceph -c "$CONF" $(auth_args) "$@"; }

# Starts a daemon in the foreground mode under setsid and records its PID.
spawn() {
  local name="$1"; shift
  setsid "$@" -f -c "$CONF" >>"$DIR/log/$name.out" 2>&1 < /dev/null &
  echo $! > "$DIR/pids/$name"
}

start_osd() {
  local id="$1"
  spawn "osd.$id" ceph-osd -i "$id"
}

kill_pid_file() {
  local f="$1" sig="${2:-TERM}" pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then kill "-$sig" "$pid" 2>/dev/null || true; fi
  rm -f "$f"
}

wait_gone() {
  local pid="$1" i
  for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}

write_conf() {
  local fsid="$1" p2="$2" p1="$3"
  cat > "$CONF" <<EOF
[global]
fsid = $fsid
mon_host = [v2:127.0.0.1:$p2,v1:127.0.0.1:$p1]
public_addr = 127.0.0.1
public_network = 127.0.0.0/8
ms_bind_ipv6 = false
auth_cluster_required = $AUTH
auth_service_required = $AUTH
auth_client_required = $AUTH
run_dir = $DIR/run
log_file = $DIR/log/\$name.log
pid_file = $DIR/run/\$name.pid
log_to_stderr = false
err_to_stderr = true
osd_pool_default_size = 3
osd_pool_default_min_size = 2
osd_pool_default_pg_num = 16
osd_pool_default_pgp_num = 16
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
mon_allow_pool_delete = true
mon_warn_on_pool_no_redundancy = false
mon_osd_min_down_reporters = 1
mon_osd_down_out_interval = 0
[client]
# Clients (kvfold-memory, tests, tools) neither log to a file nor open an admin socket: a
# process may hold several cluster connections.
log_to_file = false
admin_socket =
[mon]
admin_socket = $DIR/run/\$name.asok
mon_data = $DIR/mon/\$name
mon_cluster_log_file = $DIR/log/cluster.log
[osd]
admin_socket = $DIR/run/\$name.asok
osd_data = $DIR/osd/\$name
keyring = $DIR/osd/\$name/keyring
osd_objectstore = memstore
memstore_device_bytes = $((OSD_MB << 20))
osd_heartbeat_interval = 1
osd_heartbeat_grace = 4
osd_op_num_shards = 2
osd_op_num_threads_per_shard = 1
osd_max_object_size = 134217728
osd_memory_target = 536870912
osd_pg_log_trim_min = 10
osd_min_pg_log_entries = 100
osd_max_pg_log_entries = 500
EOF
}

cmd_start() {
  need_packages
  if [ -f "$DIR/pids/mon.a" ] && kill -0 "$(cat "$DIR/pids/mon.a")" 2>/dev/null; then
    die "a cluster already runs in $DIR (stop it first)"
  fi
  rm -rf "$DIR"
  mkdir -p "$DIR"/{run,log,pids,mon,osd}
  local fsid p2 p1
  fsid=$(cat /proc/sys/kernel/random/uuid)
  p2=$(free_port); p1=$(free_port)
  write_conf "$fsid" "$p2" "$p1"

  ceph-authtool --create-keyring "$DIR/mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  if [ "$AUTH" = cephx ]; then
    ceph-authtool --create-keyring "$DIR/admin.keyring" --gen-key -n client.admin \
      --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' >/dev/null
    ceph-authtool "$DIR/mon.keyring" --import-keyring "$DIR/admin.keyring" >/dev/null
  fi
  monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$p2,v1:127.0.0.1:$p1]" \
    "$DIR/monmap" >/dev/null
  ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" --keyring "$DIR/mon.keyring" \
    >>"$DIR/log/mkfs.out" 2>&1 || die "ceph-mon --mkfs failed (see $DIR/log)"
  spawn mon.a ceph-mon -i a
  local i
  for i in $(seq 1 100); do ceph_cmd mon stat >/dev/null 2>&1 && break; sleep 0.2; done
  ceph_cmd mon stat >/dev/null 2>&1 || die "monitor did not come up (see $DIR/log)"

  local id uuid
  for i in $(seq 0 $((NUM_OSDS - 1))); do
    uuid=$(cat /proc/sys/kernel/random/uuid)
    mkdir -p "$DIR/osd/osd.$i"
    if [ "$AUTH" = cephx ]; then
      local secret
      secret=$(ceph-authtool --gen-print-key)
      echo "{\"cephx_secret\": \"$secret\"}" > "$DIR/osd/osd.$i.json"
      id=$(ceph_cmd osd new "$uuid" -i "$DIR/osd/osd.$i.json")
      ceph-authtool --create-keyring "$DIR/osd/osd.$i/keyring" --name "osd.$i" \
        --add-key "$secret" >/dev/null
    else
      id=$(ceph_cmd osd new "$uuid")
    fi
    [ "$id" = "$i" ] || die "expected osd id $i, got '$id'"
    ceph-osd -c "$CONF" -i "$i" --mkfs --osd-uuid "$uuid" >>"$DIR/log/mkfs.out" 2>&1 ||
      die "ceph-osd --mkfs $i failed (see $DIR/log)"
    start_osd "$i"
  done
  ceph_cmd osd pool create "$POOL" 16 16 replicated >/dev/null 2>&1 || die "pool create failed"
  ceph_cmd osd pool set "$POOL" size 3 >/dev/null 2>&1
  ceph_cmd osd pool set "$POOL" min_size 2 >/dev/null 2>&1
  ceph_cmd osd pool application enable "$POOL" kvfold >/dev/null 2>&1
  for i in $(seq 1 150); do cmd_status >/dev/null 2>&1 && break; sleep 0.2; done
  cmd_status >/dev/null 2>&1 || die "pool '$POOL' did not become writable (see $DIR/log)"
  echo "ceph_dev: cluster up in $DIR (pool $POOL, $NUM_OSDS OSDs, auth $AUTH)" >&2
  echo "$CONF"
  if [ "$AUTH" = cephx ]; then echo "$DIR/admin.keyring"; fi
}

# Healthy = all OSDs up and a write + read of a probe object in the pool succeed.
cmd_status() {
  [ -f "$CONF" ] || { echo "ceph_dev: no cluster in $DIR" >&2; return 1; }
  local up
  up=$(ceph_cmd osd stat -f json 2>/dev/null | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["num_up_osds"])' 2>/dev/null || echo 0)
  echo "ceph_dev: $up/$NUM_OSDS OSDs up" >&2
  echo probe | timeout 10 rados -c "$CONF" $(auth_args) -p "$POOL" put ceph_dev_probe - 2>/dev/null || return 1
  timeout 10 rados -c "$CONF" $(auth_args) -p "$POOL" stat ceph_dev_probe >/dev/null 2>&1 || return 1
  [ "$up" = "$NUM_OSDS" ]
}

cmd_stop() {
  [ -d "$DIR/pids" ] || { rm -rf "$DIR"; return 0; }
  local f pid pids=()
  for f in "$DIR"/pids/*; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid" 2>/dev/null || true; pids+=("$pid"); fi
    rm -f "$f"
  done
  for pid in "${pids[@]}"; do wait_gone "$pid"; done
  rm -rf "$DIR"
  echo "ceph_dev: stopped (${#pids[@]} processes)" >&2
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  kill-osd) kill_pid_file "$DIR/pids/osd.${2:?osd id}" KILL ;;
  start-osd) start_osd "${2:?osd id}" ;;
  *) echo "usage: $0 start|stop|status|kill-osd N|start-osd N" >&2; exit 2 ;;
esac
