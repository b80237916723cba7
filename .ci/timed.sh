# Sourced by .ci/run: each step timed, and the run held to its budget.
#   timed NAME SECONDS command...   runs the command; prints its wall time
#                                   beside the step's budget
#   budget_summary LIMIT            the table of every step, and exit 1 when
#                                   the steps together took more than LIMIT
#                                   seconds or a step marked hard (below)
#                                   passed its own budget
# CI's own limit is 90 minutes; the budgets keep a fresh clone's run well
# inside it, so that growth shows as a loud failure here before a
# submission is lost to the limit. A step's budget is a hard limit when
# NAME ends in "!" (the default suite's 15 minutes); the others are
# guides, named in the table when passed.
_timed_rows=()
_timed_total=0
_timed_failed=0

_minutes() { echo "$(($1 / 60)).$(($1 % 60 * 10 / 60))"; }

timed() {
    local name=$1 budget=$2 start status=0 took mark=""
    shift 2
    echo "== $name: $* (budget $((budget / 60)) min)"
    start=$(date +%s)
    "$@" || status=$?
    took=$(( $(date +%s) - start ))
    _timed_total=$((_timed_total + took))
    if [ "$took" -gt "$budget" ]; then
        mark="OVER BUDGET"
        case $name in *!) _timed_failed=1 ;; esac
    fi
    _timed_rows+=("$(printf '%-16s %5d s  %5s min  budget %3d min  %s' "${name%!}" "$took" \
        "$(_minutes "$took")" $((budget / 60)) "$mark")")
    echo "== $name: ${took} s${mark:+ ($mark)}"
    [ "$status" = 0 ] || { echo "== $name FAILED (exit status $status)"; budget_summary 0; exit "$status"; }
}

budget_summary() {
    local limit=$1
    echo "== CI time per step (this run)"
    printf '%s\n' "${_timed_rows[@]}"
    printf '%-16s %5d s  %5s min\n' "all" "$_timed_total" "$(_minutes "$_timed_total")"
    [ "$limit" -gt 0 ] || return 0
    if [ "$_timed_total" -gt "$limit" ]; then
        echo "== FAILED: CI took $((_timed_total / 60)) min, over its budget of $((limit / 60)) min (CI's hard limit is 90)."
        echo "   Make the new tests cheaper or mark the long cases slow (docs/testing.md)."
        exit 1
    fi
    if [ "$_timed_failed" = 1 ]; then
        echo "== FAILED: a step marked hard took longer than its budget (above)."
        exit 1
    fi
}
