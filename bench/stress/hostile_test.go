package stress

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/arena"
)

// A real consumer worker, sent descriptors of 2^40 and 2^62 bytes that
// name a real segment, refuses them (no allocation, no crash), keeps
// reading the good ones, and stops cleanly.
func TestWorkerRefusesHugeDescriptors(t *testing.T) {
	runDir := shmDir(t)
	sockDir := shortTempDir(t)
	cfg := WorkerConfig{Role: "consumer", Index: 0, RunDir: runDir, SockDir: sockDir, Producers: 1, Consumers: 1,
		Transport: string(arena.TransportArena), MinSize: 1 << 10, MaxSize: 64 << 10, Fanout: 1, Inflight: 4,
		SegmentSize: 1 << 20, MaxSegments: 1, ReportEvery: 20 * time.Millisecond}
	b, _ := json.Marshal(cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if _, err := stdin.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
	a, err := arena.New(arena.Config{Dir: runDir, Entity: "p0", SegmentSize: 1 << 20, MaxSegments: 1, NoSignalHandler: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var lk *arena.Link
	for i := 0; ; i++ {
		lk, err = arena.Dial(filepath.Join(sockDir, "c0.sock"), arena.Hello{Role: arena.Producer, Transport: arena.TransportArena, Entity: "p0"}, time.Second)
		if err == nil {
			break
		}
		if i == 500 {
			t.Fatalf("dialing the worker: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	snd := arena.NewSender(lk, a, nil)
	good, err := a.Put(context.Background(), make([]byte, 4096), arena.Meta{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	var hostile []arena.Descriptor
	for i, size := range []int64{1 << 40, 1 << 62} {
		d := good
		d.ID, d.Size, d.HasChecksum = 1000+uint64(i), size, false
		hostile = append(hostile, d)
	}
	if err := snd.Send(append(hostile, good)...); err != nil {
		t.Fatal(err)
	}
	var last Report
	var errs []string
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	deadline := time.Now().Add(30 * time.Second)
	for sc.Scan() && time.Now().Before(deadline) {
		var r Report
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("worker report %q: %v", sc.Text(), err)
		}
		last, errs = r, append(errs, r.Errors...)
		if r.Received >= 1 && r.ReadErrors >= 2 {
			break
		}
	}
	snd.Close()
	stdin.Close()
	for sc.Scan() { // until the final report and exit
		var r Report
		if json.Unmarshal(sc.Bytes(), &r) == nil {
			last, errs = r, append(errs, r.Errors...)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("worker exit: %v (it must survive hostile descriptors)", err)
	}
	if last.Received != 1 || last.ReadErrors != 2 || !last.Final {
		t.Fatalf("worker report %+v, want 1 received, 2 read errors, final", last)
	}
	refused := 0
	for _, e := range errs {
		if strings.Contains(e, "refused") && strings.Contains(e, "past the end of segment") {
			refused++
		}
	}
	if refused != 2 {
		t.Errorf("worker errors %q: want 2 refusals naming the segment's end", errs)
	}
}

// A run that was only too short cannot tell; one that also failed a gate,
// or that ran to its count, is judged as it is.
func TestCannotTell(t *testing.T) {
	short := Summary{Options: Options{Duration: 2 * time.Second}, Stopped: "duration", Delivered: 3, Elapsed: 2 * time.Second}
	if why := short.CannotTell(); !strings.Contains(why, "3 tensors delivered in 2.0s") {
		t.Errorf("short run: %q", why)
	}
	for _, g := range short.Gates() {
		if !g.Pass {
			t.Errorf("short run failed gate %q: %s", g.Name, g.Reason)
		}
	}
	if r := short.Result(); !r.Passed() || len(r.Warnings) == 0 || !strings.HasPrefix(r.Warnings[0], "cannot tell") {
		t.Errorf("short run's result: passed %v, warnings %q", r.Passed(), r.Warnings)
	}
	corrupt := short
	corrupt.Corrupt = 1
	if corrupt.CannotTell() != "" {
		t.Error("a run with a corrupted payload is a failure, not cannot-tell")
	}
	none := Summary{Stopped: "duration", Delivered: 0, Unexpected: []string{"producer 0 exited"}}
	if none.CannotTell() != "" || gateMap(&none)["tensors delivered"] {
		t.Error("a run whose worker died and that delivered nothing must fail its gates")
	}
	enough := short
	enough.Delivered = MinJudged
	if enough.CannotTell() != "" || !gateMap(&enough)["tensors delivered"] {
		t.Error("a run that delivered enough is judged")
	}
}
