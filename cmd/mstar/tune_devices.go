package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/reports/results"
)

// tuneFanOut runs tune moe on several GPUs: each worker tunes its batches
// into a folder of its own, seeded with --dir's tuned files (so batches
// already tuned are skipped, as in a resumed tune), and the batches they
// tuned are then written into --dir's files.
func (a *app) tuneFanOut(f fanOut, dir, out string) error {
	var wdirs []string
	f.drop = []string{"dir"}
	f.extra = func(k int, tmp string) ([]string, error) {
		w := filepath.Join(tmp, fmt.Sprintf("configs-%d", k))
		if err := seedTunedDir(dir, w); err != nil {
			return nil, err
		}
		wdirs = append(wdirs, w)
		return []string{"--dir", w}, nil
	}
	return a.runFanOut(f, "tune moe", out, func(*results.Document) error {
		written, err := joinTunedDirs(dir, wdirs)
		for _, p := range written {
			say(a.stderr, "wrote %s", p)
		}
		return err
	})
}

// tunedFiles reads the tuned files of dir (other files are left alone).
func tunedFiles(dir string) (map[string]*moe.TunedFile, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	out := map[string]*moe.TunedFile{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if f, err := moe.ParseTunedFile(b, p); err == nil {
			out[filepath.Base(p)] = f
		}
	}
	return out, nil
}

// seedTunedDir makes dst with a copy of src's tuned files.
func seedTunedDir(src, dst string) error {
	fs, err := tunedFiles(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, f := range fs {
		if _, err := moe.WriteTunedFile(dst, f); err != nil {
			return err
		}
	}
	return nil
}

// joinTunedDirs writes into dst's tuned files the batches of the workers'
// folders: per batch the newest (a batch tuned by a worker is newer than
// the copy it started from; with --replicate the last GPU to finish it
// wins), and a file of other kernels is replaced. It returns the files it
// wrote.
func joinTunedDirs(dst string, srcs []string) ([]string, error) {
	have, err := tunedFiles(dst)
	if err != nil {
		return nil, err
	}
	changed := map[string]bool{}
	for _, src := range srcs {
		fs, err := tunedFiles(src)
		if err != nil {
			return nil, err
		}
		for name, f := range fs {
			d := have[name]
			if d == nil || d.KernelVersion != f.KernelVersion {
				have[name], changed[name] = f, true
				continue
			}
			for _, r := range f.TunedRoutings() {
				for _, m := range f.TunedBatchSizesUnder(r) {
					b, _ := f.Get(m, r)
					if old, ok := d.Get(m, r); !ok || b.Date.After(old.Date) {
						d.Set(m, b)
						changed[name] = true
					}
				}
			}
		}
	}
	var written []string
	for name := range changed {
		p, err := moe.WriteTunedFile(dst, have[name])
		if err != nil {
			return written, err
		}
		written = append(written, p)
	}
	return written, nil
}
