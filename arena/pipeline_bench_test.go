package arena

import (
	"context"
	"testing"
)

// BenchmarkPipeline moves 4 KiB tensors producer -> consumer through one
// link: Put, Send, Next, ReadBatch (copy out + ACK), slot freed.
func BenchmarkPipeline(b *testing.B) {
	for _, tr := range []Transport{TransportArena, TransportFile} {
		b.Run(string(tr), func(b *testing.B) {
			a := newTestArena(b, Config{Transport: tr, SegmentSize: 64 << 20, MaxSegments: 1, SpillAfter: 1 << 40})
			pl, cl, err := LinkPair(Hello{Role: Producer, Transport: tr, Entity: "p"}, Hello{Role: Consumer, Transport: tr, Entity: "c"})
			if err != nil {
				b.Fatal(err)
			}
			const window = 256
			tokens := make(chan struct{}, window)
			snd := NewSender(pl, a, func(uint64, bool) { <-tokens })
			defer snd.Close()
			rd := NewReader(ReaderConfig{Dir: a.Config().Dir, Transport: tr})
			rcv := NewReceiver(cl, rd)
			defer rcv.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				bufs := make([][]byte, window)
				for i := range bufs {
					bufs[i] = make([]byte, 4096)
				}
				got := 0
				for got < b.N {
					ds, err := rcv.Next(context.Background())
					if err != nil {
						b.Error(err)
						return
					}
					if err := rcv.ReadBatch(ds, bufs[:len(ds)]); err != nil {
						b.Error(err)
						return
					}
					got += len(ds)
				}
			}()
			src := pattern(4096, 1)
			b.SetBytes(4096)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tokens <- struct{}{}
				d, err := a.Put(context.Background(), src, Meta{}, 1)
				if err != nil {
					b.Fatal(err)
				}
				if err := snd.Send(d); err != nil {
					b.Fatal(err)
				}
			}
			<-done
			for range window {
				tokens <- struct{}{}
			}
		})
	}
}
