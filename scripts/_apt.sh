# Shared by scripts/setup-*: Debian's apt-get as the project's scripts run it, as root and
# without prompts. Usage: . scripts/_apt.sh; apt_get install -y -qq PACKAGE
#
# apt downloads as its sandbox user, _apt, by default. On the machines this project runs on
# only root may resolve names: as _apt every mirror is "Temporary failure resolving" and
# apt-get install fails for want of the package. So the download methods run as root here
# (APT::Sandbox::User=root); what they fetch is still checked against Debian's signed indexes.
# A held dpkg lock (another setup script, unattended-upgrades) is waited for, two minutes.
apt_get() {
  DEBIAN_FRONTEND=noninteractive apt-get -o APT::Sandbox::User=root -o DPkg::Lock::Timeout=120 "$@"
}

# apt_install PACKAGE...: install without prompts or recommends, reading the package lists again only when
# the install fails without it (no lists yet, or lists so old a mirror no longer has what they name): the
# setup scripts of one run share one `apt-get update` instead of each making its own.
apt_install() {
  if ! apt_get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1; then
    apt_get update -qq
    apt_get install -y -qq --no-install-recommends "$@" >/dev/null
  fi
}
