# Sourced by the build scripts: a build is current when its stamp holds the hash of the files that
# made it (content, not mtime: a fresh clone or a checkout must not trigger a rebuild).
# usage: . stamp.sh TARGET_DIR FILE...  -> exits 0 early when current; `stamp_done` writes the stamp.
stamp_target=$1
shift
stamp_want=$(cat "$@" | sha256sum | cut -d' ' -f1)
if [ -f "$stamp_target/.stamp" ] && [ "$(cat "$stamp_target/.stamp")" = "$stamp_want" ]; then
  exit 0
fi
stamp_done() { echo "$stamp_want" > "$stamp_target/.stamp"; }
