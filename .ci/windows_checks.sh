#!/usr/bin/env bash
# The Windows checks of .ci/run: Debian's Wine and mingw-w64 for the tests against a real
# kernel32 (suites/mapper/test_wine_*.py), and the Wine lane (.ci/wine_lane.py). Run as root, as
# CI runs .ci/run (linux.yml's Debian 12 container), they are meant to run: a tool that cannot be
# installed, or a lane that cannot be set up, fails the run. Elsewhere they skip, with a warning.
#
#   bash .ci/windows_checks.sh install   # before the tests: wine, wine64, gcc-mingw-w64-x86-64
#   bash .ci/windows_checks.sh lane      # after them: the Wine lane (python: the project's venv)
set -uo pipefail
required=$([ "$(id -u)" -eq 0 ] && echo 1 || echo 0)
have_tools() { command -v wine >/dev/null 2>&1 && command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1; }
skipped() {
  if [ "$required" -eq 1 ]; then
    echo "error: $1: the Windows checks did not run (.ci/run as root is where they must)" >&2
    exit 1
  fi
  echo "warning: $1: the Windows checks (the Wine tests and the Wine lane) skip" >&2
  exit 0
}
case "${1:-}" in
  install)
    have_tools && exit 0
    [ "$required" -eq 1 ] || skipped "wine or gcc-mingw-w64-x86-64 is not installed (and this is not root)"
    # wine itself too: wine64 only Recommends it, and an apt set not to install those skips it
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wine wine64 gcc-mingw-w64-x86-64 >/dev/null) \
      || skipped "apt-get could not install wine, wine64 and gcc-mingw-w64-x86-64"
    have_tools || skipped "wine or x86_64-w64-mingw32-gcc is missing after the install"
    ;;
  lane)
    command -v wine >/dev/null 2>&1 || skipped "wine is not installed"
    lane=0
    # its run folders and doctor.json go with the uploaded artifacts when CI names a folder
    python .ci/wine_lane.py ${REPORT_ARTIFACT_DIR:+--out "$REPORT_ARTIFACT_DIR/wine-lane"} || lane=$?
    [ "$lane" -eq 2 ] && skipped "the Wine lane could not be set up (see above)"
    exit "$lane"
    ;;
  *)
    echo "usage: bash .ci/windows_checks.sh install|lane" >&2
    exit 2
    ;;
esac
