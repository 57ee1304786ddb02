// Package chart draws line charts as small, self-contained SVG documents
// for sluice-bench's reports: panels side by side, each with a linear or
// logarithmic axis per dimension and readable ticks, series drawn solid or
// dashed with labelled points, rings on marked points (a curve's knee),
// horizontal reference lines (an SLO) and one legend for the chart. It
// also finds where a latency curve leaves a bound (FindKnee).
//
// Contracts:
//   - The output is one SVG element with inline attributes only: no
//     scripts, stylesheets, fonts or external references, so it renders the
//     same from a README, a browser or a file.
//   - Every series is drawn as exactly one <path> per panel it appears in,
//     and nothing else is a <path>, so tools can count and find series.
//   - Output is deterministic: the same Chart writes the same bytes.
//
// The package imports only the standard library and knows nothing of
// routing or benchmarks.
package chart
