package gpu

import (
	"bytes"
	"slices"
	"testing"
	"time"
)

// On the H200 the spill matrix's hibernate restores at 1 GiB run at 90%
// (device) and 92% (pinned) of the same-size ceiling in every sample, and at
// 100% at 256 MiB; a hibernate restore writes into memory allocated just
// before it, the ceiling into a buffer allocated once. This probe times the
// same copies into a long-lived buffer and into a fresh one (which goes first
// alternates by round) and checks the bytes landed. It logs the numbers; it
// gates nothing on them. Skips without a GPU. Measured 2026-12-02
// (reports/measured/h200/spill-gate/fresh-alloc/): fresh and long-lived are
// equal; the first pinned copy after the fills runs at ~90%, at 256 MiB as
// at 1 GiB, so why the 256 MiB restores reach 100% is still open.
func TestFreshAllocationCopyProbeCUDA(t *testing.T) {
	d := openCUDAForTest(t)
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, size := range []int64{256 << 20, 1 << 30} {
		host, free, err := d.AllocPinned(size)
		if err != nil {
			t.Fatal(err)
		}
		for i := range host {
			host[i] = byte(i*7 + i>>20)
		}
		src, err := d.Alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		old, err := d.Alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		const blocks = 16
		each := size / blocks
		// timed queues one copy per block, as the spill mover does, between
		// two events.
		timed := func(copyBlock func(off int64) error) time.Duration {
			start, err := s.Record()
			if err != nil {
				t.Fatal(err)
			}
			for b := int64(0); b < blocks; b++ {
				if err := copyBlock(b * each); err != nil {
					t.Fatal(err)
				}
			}
			end, err := s.Record()
			if err != nil {
				t.Fatal(err)
			}
			if err := end.Sync(); err != nil {
				t.Fatal(err)
			}
			dt, err := end.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			start.Close()
			end.Close()
			return dt
		}
		h2d := func(dst Buffer) time.Duration {
			return timed(func(off int64) error { return s.CopyHtoD(dst, off, host[off:off+each]) })
		}
		d2d := func(dst Buffer) time.Duration {
			return timed(func(off int64) error { return s.CopyDtoD(dst, off, src, off, each) })
		}
		h2d(src)
		check := func(what string, dst Buffer) {
			got := make([]byte, 4096)
			for _, off := range []int64{0, size/2 + 12345, size - 4096} {
				if err := s.CopyDtoH(got, dst, off); err != nil {
					t.Fatal(err)
				}
				if err := s.Sync(); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, host[off:off+4096]) {
					t.Fatalf("%s: the bytes at %d did not land", what, off)
				}
			}
		}
		var times [4][]float64            // h2d old, h2d fresh, d2d old, d2d fresh (GB/s)
		var firstH2D, secondH2D []float64 // the same pinned copies by position after the fills
		gbps := func(dt time.Duration) float64 { return float64(size) / dt.Seconds() / 1e9 }
		// poisoned fills bufs and waits, as a hibernate restore's pool is.
		poisoned := func(bufs ...Buffer) {
			for _, b := range bufs {
				if err := s.Memset(b, 0, size, 0xA5); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		for round := 0; round < 9; round++ {
			fresh, err := d.Alloc(size)
			if err != nil {
				t.Fatal(err)
			}
			poisoned(old, fresh)
			a, b := alternated(round, func() float64 { return gbps(h2d(old)) }, func() float64 { return gbps(h2d(fresh)) })
			check("pinned → long-lived", old)
			check("pinned → fresh", fresh)
			if err := fresh.Free(); err != nil {
				t.Fatal(err)
			}
			if fresh, err = d.Alloc(size); err != nil {
				t.Fatal(err)
			}
			poisoned(fresh)
			c, e := alternated(round, func() float64 { return gbps(d2d(old)) }, func() float64 { return gbps(d2d(fresh)) })
			check("device → fresh", fresh)
			if err := fresh.Free(); err != nil {
				t.Fatal(err)
			}
			if round == 0 {
				continue // warm-up
			}
			first, second := a, b
			if round%2 == 1 {
				first, second = b, a
			}
			firstH2D, secondH2D = append(firstH2D, first), append(secondH2D, second)
			for i, v := range []float64{a, b, c, e} {
				times[i] = append(times[i], v)
			}
		}
		med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
		t.Logf("%d MiB in %d blocks, median of %d: pinned→device long-lived %.2f GB/s, fresh %.2f (%.1f%%); device→device long-lived %.1f, fresh %.1f (%.1f%%)",
			size>>20, blocks, len(times[0]), med(times[0]), med(times[1]), 100*med(times[1])/med(times[0]), med(times[2]), med(times[3]), 100*med(times[3])/med(times[2]))
		t.Logf("%d MiB pinned→device by position: first copy after the fills %.2f GB/s, second %.2f", size>>20, med(firstH2D), med(secondH2D))
		for _, f := range []func() error{src.Free, old.Free, free} {
			if err := f(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// alternated runs long-lived then fresh on even rounds and the other way
// round on odd ones (the first copy after the fills may be the slow one,
// whichever buffer it writes) and returns their results in that order.
func alternated(round int, longLived, fresh func() float64) (l, f float64) {
	if round%2 == 0 {
		l = longLived()
		return l, fresh()
	}
	f = fresh()
	return longLived(), f
}
