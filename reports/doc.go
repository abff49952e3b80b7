// Package reports renders results documents (package results) for people and
// CI: Render prints tables (text, markdown, CSV, JSON), one per environment;
// Diff compares two sets of documents with the Mann-Whitney U test, as
// benchstat does, and says for each metric whether it got worse,
// significantly, by more than the threshold, with enough samples to tell;
// RenderDiff prints a comparison; ExportGoBench writes the Go benchmark format
// for benchstat; Merge joins documents from several machines keeping each
// result's environment; Plot draws a metric against a numeric parameter.
//
// Only cmd/mstar imports this package (it pulls in gonum/plot and
// tablewriter); producers import package results.
package reports
