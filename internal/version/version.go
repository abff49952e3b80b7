// Package version reports mstar's module version and the git commit it was
// built from, read from the build information the Go toolchain embeds.
package version

import "runtime/debug"

// Info is what `mstar version` prints and what every results document records.
type Info struct {
	Module   string // module version, "(devel)" for a local build
	Commit   string // vcs.revision, "unknown" when not built from a checkout
	Modified bool   // the checkout had uncommitted changes
	Go       string
}

// Get reads the embedded build information.
func Get() Info {
	info := Info{Module: "(devel)", Commit: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	info.Go = bi.GoVersion
	if bi.Main.Version != "" {
		info.Module = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// Short is "v1.2.3 (abc123def456)" with "+dirty" when modified.
func (i Info) Short() string {
	c := i.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	if i.Modified {
		c += "+dirty"
	}
	return i.Module + " (" + c + ")"
}
