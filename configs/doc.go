// Package configs holds the router's file schema and turns a YAML file into a
// validated Config in two visible steps: strict decoding (unknown fields are
// errors), then defaults, then validation that names every bad field by path.
//
// Contracts: Load and Parse never return a partially valid Config; Validate
// reports every problem at once with errors.Join.
//
// This package must not build runtime objects or import anything of Sluice's:
// cmd/sluice reads a Config and wires the router from it.
package configs
