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

# ceilings BIN DIR: DIR/ceilings.json from BIN's bench ceilings on cuda:0,
# unless an earlier step of the call already measured it (its log is
# DIR/ceilings.txt).
ceilings() {
	[ -s "$2/ceilings.json" ] || timeout 120 "$1" bench ceilings --device cuda:0 --out "$2/ceilings.json" >"$2/ceilings.txt" 2>&1
}
