#!/usr/bin/env bash
# Make the real components the tests use available: a running PostgreSQL, Debian's Chromium, promtool,
# systemd-analyze (checks the agent's unit file), nginx (runs deploy/nginx/specwatch.conf in front of a server).
# Needs root for what is missing; where it cannot install, the tests say what is missing (and fail under CI=true).
set -u
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else return 1; fi; }
updated=0
apt_install() {
  [ "$updated" = 1 ] || { as_root apt-get update -qq >/dev/null 2>&1; updated=1; }
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 \
    || echo "test-deps: could not install $* (tests needing it will say so)"
}

[ -x /usr/bin/chromium ] || apt_install chromium
command -v promtool >/dev/null || apt_install prometheus
command -v systemd-analyze >/dev/null || apt_install systemd
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null || apt_install nginx-light

if ! command -v pg_ctlcluster >/dev/null; then
  apt_install postgresql
  fresh_pg=1
fi
if command -v pg_lsclusters >/dev/null; then
  ver=$(pg_lsclusters -h 2>/dev/null | awk 'NR==1{print $1}')
  if [ -n "$ver" ]; then
    if [ "${fresh_pg:-0}" = 1 ]; then
      hba=/etc/postgresql/$ver/main/pg_hba.conf
      # the tests connect as postgres over loopback without a password
      grep -q '^host all all 127.0.0.1/32 trust' "$hba" 2>/dev/null || as_root sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
    fi
    pg_lsclusters -h | awk '{print $4}' | grep -q online \
      || as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start \
      || echo "test-deps: could not start PostgreSQL $ver"
    [ "${fresh_pg:-0}" = 1 ] && as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main reload
  fi
fi
for i in $(seq 1 30); do
  pg_isready -h 127.0.0.1 -q 2>/dev/null && break
  sleep 1
done
exit 0
