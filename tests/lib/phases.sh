# Times the phases of a script (sourced by test.sh and .ci/run): `phase NAME` ends the phase
# before and starts NAME; on exit, whether the script passed or failed, each phase's wall time
# is printed to stderr, so every run (CI's among them) shows where its time went.
phase_names=()
phase_seconds=()
phase_current=""
phase_started=$SECONDS
phase_script=${phase_script:-$(basename "$0")}

phase_close() {
  [[ -n "$phase_current" ]] || return 0
  phase_names+=("$phase_current")
  phase_seconds+=($((SECONDS - phase_started)))
  phase_current=""
}

phase() {
  phase_close
  phase_current=$1
  phase_started=$SECONDS
  echo "== ${phase_script}: $1" >&2
}

phase_report() {
  local status=$? i
  phase_close
  {
    echo "== ${phase_script}: time per phase (exit status ${status}):"
    for i in "${!phase_names[@]}"; do
      printf '%6d s  %s\n' "${phase_seconds[$i]}" "${phase_names[$i]}"
    done
    printf '%6d s  total\n' "$SECONDS"
  } >&2
  return "$status"
}
trap phase_report EXIT
