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
