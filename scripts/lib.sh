# lib.sh — sourced by the GPU scripts. step CMD...: runs CMD, appending what
# ran and its output to $log (and the terminal); a failure is logged and
# sets status=1, and the script goes on to its next step.
step() {
	echo "== $*" | tee -a "$log"
	"$@" 2>&1 | tee -a "$log"
	local rc=${PIPESTATUS[0]}
	if [ "$rc" -ne 0 ]; then
		echo "== FAILED ($rc): $*" | tee -a "$log"
		status=1
	fi
}
