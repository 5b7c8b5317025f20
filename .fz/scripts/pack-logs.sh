#!/usr/bin/env bash
# Packs the raw logs of one run into its archive under bench/results/ (docs/RECORDS.md,
# "Layout"): JSON records stay plain files, raw logs (*.log, *.txt) live in RUN.tgz, stored flat
# under their own names and cited as bench/results/RUN.tgz:MEMBER.
#   scripts/pack-logs.sh [--rm] [--dir DIR] RUN FILE...
#   RUN    the run's record name, DATE-MACHINE-WHAT[-COMMIT] (2026-11-29-h200-gpu-tests-1cee88e)
#   FILE   raw logs, anywhere; each is stored under its base name (two with one name: an error)
#   --rm   remove each FILE once the archive is written (git rm it if git tracks it)
#   --dir  where the archive goes (default: bench/results of this checkout)
# An archive that exists keeps its members and gains the new ones; a FILE whose name it already
# holds must be the same bytes. The archive is reproducible: members sorted by name, mtime
# 2026-01-01 UTC, owner and group 0, mode 0644, gzip without a name or time stamp, so packing
# the same files again gives the same bytes.
set -euo pipefail
usage() { echo "usage: scripts/pack-logs.sh [--rm] [--dir DIR] RUN FILE..." >&2; exit 2; }
remove=0
dir="$(cd "$(dirname "$0")/.." && pwd)/bench/results"
while [ $# -gt 0 ]; do
  case "$1" in
    --rm) remove=1 ;;
    --dir) [ $# -ge 2 ] || usage; dir=$2; shift ;;
    --) shift; break ;;
    -*) echo "pack-logs: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
  shift
done
[ $# -ge 2 ] || usage
run=$1
shift
[[ $run =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}-[A-Za-z0-9][A-Za-z0-9._-]*$ && $run != *.tgz ]] || {
  echo "pack-logs: '$run' is not a run name (DATE-MACHINE-WHAT[-COMMIT], no extension)" >&2
  exit 2
}
[ -d "$dir" ] || { echo "pack-logs: no directory $dir" >&2; exit 2; }
archive="$dir/$run.tgz"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
if [ -e "$archive" ]; then
  tar -xzf "$archive" -C "$stage"
  if [ -n "$(find "$stage" -mindepth 1 -type d -print -quit)" ]; then
    echo "pack-logs: $archive has folders; its members are not flat" >&2
    exit 1
  fi
fi
for f in "$@"; do
  [ -f "$f" ] || { echo "pack-logs: $f is not a file" >&2; exit 1; }
  name=$(basename -- "$f")
  case "$name" in
    *.json) echo "pack-logs: $f is a JSON record: those stay plain files" >&2; exit 1 ;;
  esac
  if [ -e "$stage/$name" ]; then
    cmp -s -- "$f" "$stage/$name" || {
      echo "pack-logs: $archive already holds another $name" >&2
      exit 1
    }
  fi
  cp -- "$f" "$stage/$name"
done

tmp="$archive.tmp.$$"
(cd "$stage" && find . -mindepth 1 -maxdepth 1 -type f -printf '%P\n' | LC_ALL=C sort |
  TZ=UTC tar --format=gnu --sort=name --mtime='2026-01-01' --owner=0 --group=0 --numeric-owner \
    --mode='u=rw,go=r' -cf - --no-recursion -T -) | gzip -n -9 > "$tmp"
mv -f -- "$tmp" "$archive"
echo "$archive: $(tar -tzf "$archive" | tr '\n' ' ')"
if [ "$remove" = 1 ]; then
  for f in "$@"; do
    rm -f -- "$f"
  done
fi
