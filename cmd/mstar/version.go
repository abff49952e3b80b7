package main

import (
	"fmt"

	"github.com/mstar-dev/mstar/internal/version"
	"github.com/spf13/cobra"
)

func init() {
	register(func(a *app) *cobra.Command {
		return &cobra.Command{
			Use:     "version",
			Short:   "Print mstar's module version and git commit",
			Example: "  mstar version",
			Args:    cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				v := version.Get()
				fmt.Fprintf(a.stdout, "mstar %s\ncommit %s\ngo %s\n", v.Module, v.Commit, v.Go)
				return nil
			},
		}
	})
}
