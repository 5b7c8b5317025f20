# Steps of a GPU run, each bounded in time and recorded in OUTDIR/summary.json by
# scripts/summary.py. Sourced by scripts/multi-gpu-run.sh and scripts/gpu-check.sh.
#
# The caller sets: out (OUTDIR, absolute), dry (1: print each step's commands, run nothing),
# run_end (the value of SECONDS by which the whole run must be over; 0: no limit), optionally
# step_limits[NAME]="LIMIT EXPECT", and calls `summary.py start` first. A step is
#     step_begin NAME [LIMIT [EXPECT]] || return 0 # LIMIT: seconds its commands may take together
#     step_cmd [VAR=value...] PROGRAM ARGS...      # each command, logged to $step_log
#     step_end [--log PARSER:PATH]... [--record PATH]...
# or step_skip WHY after step_begin, when the step cannot run here. A step whose EXPECT (default
# LIMIT) does not fit in what is left of the run is not started ("not run"); one that the end
# of the run cut short is "not run" too; one that ran past its own LIMIT has failed.
# shellcheck shell=bash disable=SC2154  # out, dry and run_end come from the caller

steps_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
steps_keep_s=25  # kept at the end of a limited run for the summary and the tarball
declare -A step_limits=()

step_begin() {
  local spec=("${@:2}")
  [ $# -ge 2 ] || read -r -a spec <<<"${step_limits[$1]}"
  step_name=$1 step_limit=${spec[0]} step_expect=${spec[1]:-${spec[0]}}
  step_cmds=() step_rc=0 step_capped=0 step_live=0
  step_log=$out/logs/$step_name.log
  if [ "$dry" = 1 ]; then
    echo "== $step_name (at most $step_limit s, about $step_expect s)"
    return 0
  fi
  local left=$step_limit
  if [ "$run_end" -gt 0 ]; then
    left=$((run_end - steps_keep_s - SECONDS))
    if [ "$left" -lt "$step_expect" ]; then
      echo "== $step_name: not run: $((left < 0 ? 0 : left)) s left, it takes about $step_expect s"
      return 1  # and step_cmd, step_end and step_skip do nothing until the next step_begin
    fi
    if [ "$left" -lt "$step_limit" ]; then step_capped=1; else left=$step_limit; fi
  fi
  step_until=$((SECONDS + left))
  step_t0=$SECONDS step_live=1
  mkdir -p "$out/logs"
  : >"$step_log"
  echo "== $step_name (at most $left s)"
}

# The command as the summary shows it: words quoted where the shell needs it (the value only
# in VAR=value), OUTDIR for the output folder, and env in front where the command starts with
# an option of env.
step_quote() {
  if [[ $1 =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
    printf %s "$1"
  else
    printf %s "'${1//\'/\'\\\'\'}'"
  fi
}

step_text() {
  local text="" word
  [[ $1 == -* ]] && text="env "
  for word in "$@"; do
    word=${word//"$out"/OUTDIR}
    if [[ $word =~ ^([A-Za-z_][A-Za-z0-9_]*=)(.*)$ ]]; then
      text+="${BASH_REMATCH[1]}$(step_quote "${BASH_REMATCH[2]}") "
    else
      text+="$(step_quote "$word") "
    fi
  done
  printf '%s\n' "${text% }"
}

step_cmd() {
  local text rc left
  text=$(step_text "$@")
  step_cmds+=("$text")
  if [ "$dry" = 1 ]; then
    echo "   $text"
    return 0
  fi
  [ "$step_live" = 1 ] || return 124
  left=$((step_until - SECONDS))
  echo "\$ $text" >>"$step_log"
  if [ "$left" -le 0 ]; then
    rc=124
  else
    timeout -k 10 "$left" env "$@" >>"$step_log" 2>&1
    rc=$?
  fi
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "   stopped after $((SECONDS - step_t0)) s: $text" | tee -a "$step_log"
  fi
  [ "$step_rc" != 0 ] || step_rc=$rc
  return "$rc"
}

step_joined() {
  local joined
  joined=$(printf '%s ; ' "${step_cmds[@]}")
  printf '%s\n' "${joined% ; }"
}

step_end() {
  [ "$dry" != 1 ] && [ "$step_live" = 1 ] || return 0
  step_live=0
  if [ "$step_capped" = 1 ] && { [ "$step_rc" = 124 ] || [ "$step_rc" = 137 ]; }; then
    echo "   $step_name: not run: the run's time ended before the step did"
    python3 "$steps_dir/summary.py" add-step "$out" --name "$step_name" \
      --command "$(step_joined)" --not-run >/dev/null
    return 0
  fi
  local result
  result=$(python3 "$steps_dir/summary.py" add-step "$out" --name "$step_name" \
    --command "$(step_joined)" --rc "$step_rc" "$@")
  echo "   $((SECONDS - step_t0)) s: $result"
  if [[ $result != *": passed ("* ]]; then
    echo "   exit status $step_rc; the end of logs/$step_name.log:"
    tail -n 12 "$step_log" | cut -c1-200 | sed 's/^/   | /'
  fi
}

step_skip() {
  [ "$dry" = 1 ] && { echo "   (skipped where $1)"; return 0; }
  [ "$step_live" = 1 ] || return 0
  step_live=0
  echo "   skipped: $1" | tee -a "$step_log"
  python3 "$steps_dir/summary.py" add-step "$out" --name "$step_name" \
    --command "$(step_joined)" --skipped >/dev/null
}

# The steps chosen by a --steps list of names, numbers (index into the array named by $1) and
# ranges a-b, or all; prints the names one per line in the array's order, or fails naming the
# word it does not know.
steps_chosen() {
  local -n all=$1
  local list=$2 word i a b
  local -A want=()
  for word in ${list//,/ }; do
    if [ "$word" = all ]; then
      for i in "${!all[@]}"; do want[$i]=1; done
    elif [[ $word =~ ^([0-9]+)-([0-9]+)$ ]]; then
      a=${BASH_REMATCH[1]} b=${BASH_REMATCH[2]}
      if [ "$a" -gt "$b" ] || [ "$b" -ge "${#all[@]}" ]; then
        echo "no steps $word (steps 0-$((${#all[@]} - 1)))" >&2
        return 2
      fi
      for ((i = a; i <= b; i++)); do want[$i]=1; done
    elif [[ $word =~ ^[0-9]+$ ]]; then
      [ "$word" -lt "${#all[@]}" ] || { echo "no step $word (steps 0-$((${#all[@]} - 1)))" >&2; return 2; }
      want[$word]=1
    else
      for i in "${!all[@]}"; do [ "${all[$i]}" = "$word" ] && want[$i]=1 && break; done
      [ "${all[$i]}" = "$word" ] || { echo "unknown step '$word' (steps: ${all[*]})" >&2; return 2; }
    fi
  done
  [ ${#want[@]} -gt 0 ] || { echo "no step chosen" >&2; return 2; }
  for i in "${!all[@]}"; do [ -n "${want[$i]:-}" ] && echo "${all[$i]}"; done
  return 0
}

# The nccl.h of python's nvidia-nccl package (the NCCL that PyTorch runs), or nothing: builds of
# the NCCL drop-in use it rather than whatever nccl.h the CUDA toolkit directory holds, which
# may be an older release than the library loaded at run time.
nccl_include_of() {  # nccl_include_of PYTHON
  "$1" -c 'import nvidia, os
print(next((os.path.join(p, "nccl", "include") for p in nvidia.__path__
            if os.path.isfile(os.path.join(p, "nccl", "include", "nccl.h"))), ""))' 2>/dev/null
}
