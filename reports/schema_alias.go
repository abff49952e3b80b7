package reports

import "github.com/mstar-dev/mstar/reports/results"

// The schema lives in package results so that producers can import it without
// the tables, statistics and plots here; these aliases keep this package's
// signatures in the schema's own names.
type (
	Document  = results.Document
	Result    = results.Result
	Metric    = results.Metric
	Gate      = results.Gate
	Env       = results.Env
	Params    = results.Params
	Direction = results.Direction
	Summary   = results.Summary
	Role      = results.Role
	GPUState  = results.GPUState
	HostState = results.HostState
)

const (
	LowerIsBetter  = results.LowerIsBetter
	HigherIsBetter = results.HigherIsBetter
	RoleMeasured   = results.RoleMeasured
	RoleContext    = results.RoleContext
)
