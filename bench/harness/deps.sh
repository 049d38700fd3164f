# Sourced by the entry scripts of bench/: installs the Debian packages whose
# commands are missing (needs root then), nothing when all are there.
#
#   need_packages WHO COMMAND:PACKAGE ...
need_packages() {
  local who=$1 pair missing=()
  shift
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || [ -x "/usr/sbin/${pair%%:*}" ] \
      || missing+=("${pair##*:}")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "== installing ${missing[*]}"
  if [ "$(id -u)" != 0 ]; then
    echo "$who: need root to install ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
