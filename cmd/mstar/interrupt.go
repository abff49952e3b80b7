package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/mstar-dev/mstar/reports/results"
)

// interruptContext is canceled by the first SIGINT or SIGTERM: the run stops
// early, cleans up and keeps what it measured. That signal restores the
// default action, so a second one ends the process at once. Tests replace it.
var interruptContext = func() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	return ctx, stop
}

// noteInterrupted records in doc, before it is written, that the run was
// cut short: its results are the part that ran.
func noteInterrupted(doc *results.Document) {
	doc.Warnings = append(doc.Warnings, results.WarnInterrupted)
}

// errInterrupted is the error of a run cut short by a signal: exit 3, since
// the run could not complete, naming the gates that failed in the part
// that ran.
func errInterrupted(what string, failedGates []string) error {
	msg := what + " interrupted before it completed; the results cover the part that ran"
	if len(failedGates) > 0 {
		msg += fmt.Sprintf(" (%d gate(s) failed there: %s)", len(failedGates), strings.Join(failedGates, "; "))
	}
	return &exitError{code: exitBroken, err: errors.New(msg)}
}
