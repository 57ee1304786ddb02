// Package helmcheck checks what deploy/ ships, with the tools an operator
// would use: its tests render the Helm chart in deploy/helm/sluice through
// Helm's own library and decode every manifest strictly into the
// Kubernetes API's Go types (an unknown or misspelt field fails), check
// what the objects promise each other (selectors, named ports, the HPA's
// target, the Secret key the ServiceMonitor sends, the volume under
// batch.data_dir) and the warnings NOTES.txt gives, and run the real
// `sluice validate` on the config the chart renders and on the one
// deploy/compose ships.
//
// It is a module of its own so that Helm and the Kubernetes API stay out
// of Sluice's go.mod; it holds no code outside its tests. The helm CLI is a
// tool of this module:
//
//	go tool helm lint --strict ../helm/sluice
package helmcheck
