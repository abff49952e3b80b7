package main

import (
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/spf13/cobra"
)

// addDeviceFlag adds --device to a command; every device-using command
// takes it the same way.
func addDeviceFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVar(dst, "device", "auto", "device to run on: auto (a GPU when one works, else the CPU), cpu, or cuda:N")
}

// openDevice opens the device a --device value names. A bad value or a named
// device that cannot be opened is bad input (exit 2); auto's fallback to the
// CPU is said on stderr, with the reason.
func (a *app) openDevice(spec string) (gpu.Device, error) {
	s, err := gpu.ParseSpec(spec)
	if err != nil {
		return nil, usageErr("--device: %v", err)
	}
	dev, note, err := gpu.Open(s)
	if err != nil {
		return nil, usageErr("--device %s: %v", spec, err)
	}
	if note != "" {
		say(a.stderr, "%s", note)
	}
	return dev, nil
}
