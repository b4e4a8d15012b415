# Shared by the launchers: DRY_RUN=1 prints each command instead of running it, and a missing
# setting stops the launcher with its name.

run() {
  if [[ "${DRY_RUN:-0}" == 1 ]]; then
    printf '+'
    printf ' %q' "$@"
    printf '\n'
  else
    "$@"
  fi
}

require() {
  local name
  for name in "$@"; do
    if [[ -z "${!name:-}" ]]; then
      echo "error: set ${name} (see launch/README.md)" >&2
      exit 2
    fi
  done
}

# The train command every process runs; its arguments are the launcher's.
train_command() {
  local quoted
  quoted="$(printf ' %q' "$@")"
  printf 'python -m xlpretrain.train --distributed%s' "$quoted"
}
