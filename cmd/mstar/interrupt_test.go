package main

import (
	"context"
	"testing"
)

// interruptWith makes the commands' interrupt context ctx for one test.
func interruptWith(t *testing.T, ctx context.Context) {
	t.Helper()
	orig := interruptContext
	t.Cleanup(func() { interruptContext = orig })
	interruptContext = func() (context.Context, context.CancelFunc) { return ctx, func() {} }
}

// interruptAtOnce is as if SIGINT came as the run started.
func interruptAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	interruptWith(t, ctx)
}

