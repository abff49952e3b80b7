package arena

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkCosts takes the transport apart: what each step of moving one
// tensor costs on its own, so the pipeline's time per tensor can be
// accounted for (arena/README.md, "Where the time goes").
func BenchmarkCosts(b *testing.B) {
	ctx := context.Background()
	for _, size := range []int{4 << 10, 1 << 20, 64 << 20} {
		name := fmt.Sprintf("%dKiB", size>>10)
		src := pattern(size, 3)
		dst := make([]byte, size)
		b.Run("memcpy/"+name, func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				copy(dst, src)
			}
		})
		for _, threads := range []int{1, 0} {
			tname := fmt.Sprintf("threads=%d", threads)
			if threads == 0 {
				tname = fmt.Sprintf("threads=default(%d)", defaultCopyThreads())
			}
			// Put (reserve, copy in, publish) and Ack (free) with no link.
			b.Run("put+ack/"+name+"/"+tname, func(b *testing.B) {
				a := newTestArena(b, Config{SegmentSize: 256 << 20, MaxSegments: 1, CopyThreads: threads})
				b.SetBytes(int64(size))
				for b.Loop() {
					d, err := a.Put(ctx, src, Meta{}, 1)
					if err != nil {
						b.Fatal(err)
					}
					if err := a.Ack(d.ID); err != nil {
						b.Fatal(err)
					}
				}
			})
			// The consumer's copy out of a mapped peer segment.
			b.Run("read/"+name+"/"+tname, func(b *testing.B) {
				a := newTestArena(b, Config{SegmentSize: 256 << 20, MaxSegments: 1})
				d, err := a.Put(ctx, src, Meta{}, 1)
				if err != nil {
					b.Fatal(err)
				}
				rd := NewReader(ReaderConfig{Dir: a.Config().Dir, CopyThreads: threads})
				defer rd.Close()
				ds, errs := []Descriptor{d}, []error{nil}
				b.SetBytes(int64(size))
				for b.Loop() {
					rd.ReadBatchInto(ds, [][]byte{dst}, errs)
					if errs[0] != nil {
						b.Fatal(errs[0])
					}
				}
			})
		}
	}
	// One descriptor out and its ACK back over a socket pair, nothing else:
	// the control channel's round trip, per tensor when nothing is batched,
	// and per tensor when 64 share a frame each way.
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("link-roundtrip/batch=%d", batch), func(b *testing.B) {
			pl, cl, err := LinkPair(Hello{Role: Producer, Transport: TransportArena, Entity: "p"}, Hello{Role: Consumer, Transport: TransportArena, Entity: "c"})
			if err != nil {
				b.Fatal(err)
			}
			defer pl.Close()
			defer cl.Close()
			ds := make([]Descriptor, batch)
			for i := range ds {
				ds[i] = Descriptor{ID: uint64(i + 1), Loc: InSegment, File: "mstar_arena_p_1_0123456789abcdef", Size: 4096, DType: "uint8"}
			}
			go func() {
				for {
					got, _, err := cl.recv()
					if err != nil {
						return
					}
					ids := make([]uint64, len(got))
					for i := range got {
						ids[i] = got[i].ID
					}
					if cl.SendAcks(ids) != nil {
						return
					}
				}
			}()
			for b.Loop() {
				if err := pl.SendDescriptors(ds); err != nil {
					b.Fatal(err)
				}
				for n := 0; n < batch; {
					_, acks, err := pl.recv()
					if err != nil {
						b.Fatal(err)
					}
					n += len(acks)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/tensor")
			st := pl.Stats()
			b.ReportMetric(float64(st.Writes)/float64(st.FramesOut), "writes/frame")
		})
	}
}
