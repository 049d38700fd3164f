#!/usr/bin/env bash
# Installs the Debian packages the build needs beyond a C compiler (OpenSSL's
# headers and pkg-config, for httpcrypt-proto's `openssl` feature) and the
# ones the end-to-end tests need (DNS servers and
# tools for crates/httpcrypt-cli/tests/dns.rs; Redis and faketime for
# tests/resumption.rs; rspamd for tests/rspamd.rs; squid, tinyproxy, haproxy,
# nginx and varnish for tests/proxies.rs; systemd-analyze and man for
# tests/packaging.rs), only when one is missing.
# Safe to run again: it does nothing when everything is there.
set -euo pipefail

# binary (or absolute path of a file) -> package
need=(
  # the build: openssl-sys finds libcrypto through pkg-config
  "pkg-config:pkg-config"
  "/usr/include/openssl/evp.h:libssl-dev"
  "nsd:nsd"
  "unbound:unbound"
  "knotd:knot"
  "kdig:knot-dnsutils"
  "named:bind9"
  "tsig-keygen:bind9"
  "dig:dnsutils"
  "ldns-signzone:ldnsutils"
  "ldns-keygen:ldnsutils"
  "redis-server:redis-server"
  "faketime:faketime"
  # tests/rspamd.rs: a real rspamd 3.4, rspamc and rspamadm
  "rspamd:rspamd"
  "rspamc:rspamd"
  "rspamadm:rspamd"
  # tests/proxies.rs: forward, reverse and caching proxies
  "squid:squid"
  "tinyproxy:tinyproxy"
  "haproxy:haproxy"
  "nginx:nginx"
  "varnishd:varnish"
  # tests/asap.rs: network namespaces, veth pairs, sysctls, iptables rules
  "ip:iproute2"
  "iptables:iptables"
  "sysctl:procps"
  # tests/packaging.rs: the systemd unit (verify, offline security score,
  # its Documentation= man pages)
  "systemd-analyze:systemd"
  "man:man-db"
)

# Whether a program (or, for an absolute path, a file) is there.
present() {
  case "$1" in
    /*) [ -e "$1" ] ;;
    *) command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ] ;;
  esac
}

missing=()
for entry in "${need[@]}"; do
  bin=${entry%%:*}
  pkg=${entry#*:}
  if ! present "$bin"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "test dependencies: all present"
  exit 0
fi

# Unique package names.
mapfile -t pkgs < <(printf '%s\n' "${missing[@]}" | sort -u)
echo "test dependencies: installing ${pkgs[*]}"
SUDO=""
if [ "$(id -u)" != "0" ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# The tests run the daemons themselves; keep the packages' own services
# from starting where the init system would do it.
$SUDO apt-get install -y -q --no-install-recommends "${pkgs[@]}"

# Fail loudly when a program the tests call is still missing after the
# install (a package that did not install, or one that no longer ships it).
still=()
for entry in "${need[@]}"; do
  bin=${entry%%:*}
  if ! present "$bin"; then
    still+=("$bin (${entry#*:})")
  fi
done
if [ ${#still[@]} -ne 0 ]; then
  echo "test dependencies: still missing after apt-get install: ${still[*]}" >&2
  exit 1
fi
echo "test dependencies: installed"
