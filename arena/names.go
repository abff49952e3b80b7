package arena

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// File names in the shared-memory directory are
//
//	mstar_arena_<entity>_<pid>_<token>   a segment
//	mstar_spill_<entity>_<pid>_<token>   one spilled tensor (and every tensor of the file transport)
//
// The pid is the creator's and only a fast hint for the orphan sweep (pids
// are reused); the token is random, so two arenas of the same entity — in one
// process or on one shared machine — never pick the same name, and O_EXCL
// refuses the rare collision instead of truncating a live segment.
const (
	namePrefix    = "mstar_"
	KindSegment   = "arena"
	KindSpill     = "spill"
	tokenLen      = 16
	maxEntityLen  = 32
	maxNameLength = len(namePrefix) + len(KindSegment) + 1 + maxEntityLen + 1 + 10 + 1 + tokenLen
)

// Name is a parsed segment or spill-file name.
type Name struct {
	Kind   string // KindSegment or KindSpill
	Entity string // the process role that owns it: "worker0", "p3"
	PID    int
	Token  string // 16 lowercase hex digits
}

func (n Name) String() string {
	return namePrefix + n.Kind + "_" + n.Entity + "_" + strconv.Itoa(n.PID) + "_" + n.Token
}

// ValidEntity checks an entity name: 1-32 of [a-z0-9-], so that it can sit
// between the underscores of a file name and never form a path.
func ValidEntity(e string) error {
	if e == "" || len(e) > maxEntityLen {
		return fmt.Errorf("entity %q: want 1 to %d characters", e, maxEntityLen)
	}
	for i := 0; i < len(e); i++ {
		c := e[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("entity %q: character %q is not one of [a-z0-9-]", e, c)
		}
	}
	return nil
}

// ParseName parses a segment or spill-file name. It accepts nothing else:
// no directory parts, no "..", nothing longer than a real name — descriptors
// from other processes pass through it before any file is opened.
func ParseName(s string) (Name, error) {
	bad := func(why string) (Name, error) {
		return Name{}, fmt.Errorf("invalid arena file name %q: %s", clip(s), why)
	}
	if len(s) > maxNameLength {
		return bad("too long")
	}
	if strings.ContainsAny(s, "/\\\x00") || strings.Contains(s, "..") {
		return bad("contains a path separator or \"..\"")
	}
	rest, ok := strings.CutPrefix(s, namePrefix)
	if !ok {
		return bad("does not start with " + namePrefix)
	}
	// Four fields split by underscores, without allocating: this runs for
	// every descriptor a consumer receives.
	var parts [4]string
	for i := 0; i < 3; i++ {
		j := strings.IndexByte(rest, '_')
		if j < 0 {
			return bad("want mstar_<arena|spill>_<entity>_<pid>_<token>")
		}
		parts[i], rest = rest[:j], rest[j+1:]
	}
	parts[3] = rest
	if strings.IndexByte(rest, '_') >= 0 {
		return bad("want mstar_<arena|spill>_<entity>_<pid>_<token>")
	}
	var n Name
	switch parts[0] {
	case KindSegment, KindSpill:
		n.Kind = parts[0]
	default:
		return bad("kind " + strconv.Quote(parts[0]) + " is neither arena nor spill")
	}
	if err := ValidEntity(parts[1]); err != nil {
		return bad(err.Error())
	}
	n.Entity = parts[1]
	pid, err := strconv.Atoi(parts[2])
	if err != nil || pid <= 0 || len(parts[2]) > 10 || parts[2][0] < '1' || parts[2][0] > '9' {
		return bad("pid " + strconv.Quote(parts[2]) + " is not a positive decimal number")
	}
	n.PID = pid
	if len(parts[3]) != tokenLen {
		return bad("token is not 16 hex digits")
	}
	for i := 0; i < len(parts[3]); i++ {
		if c := parts[3][i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return bad("token is not 16 lowercase hex digits")
		}
	}
	n.Token = parts[3]
	return n, nil
}

// NewName names a new file of this process: its pid and a fresh token.
// Every file mstar puts in the shared-memory directory is named by it, so
// that ParseName, and with it arena clean, knows each one.
func NewName(kind, entity string) Name {
	return Name{Kind: kind, Entity: entity, PID: os.Getpid(), Token: newToken()}
}

// newToken returns 16 random hex digits.
func newToken() string {
	var b [tokenLen / 2]byte
	_, _ = rand.Read(b[:]) // never fails on Linux
	return hex.EncodeToString(b[:])
}

// clip shortens hostile input before it goes into an error message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
