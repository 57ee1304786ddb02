package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const mod = "github.com/sluice-llm/sluice/"

// TestImportDirection keeps the package arrows pointing down:
// cmd -> router -> policies -> backends -> leaves (see ARCHITECTURE.md).
func TestImportDirection(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "../../...").Output()
	require.NoError(t, err)
	var problems []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], mod)
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, mod) {
				continue
			}
			dep := strings.TrimPrefix(imp, mod)
			if why := forbidden(pkg, dep); why != "" {
				problems = append(problems, pkg+" imports "+dep+": "+why)
			}
		}
	}
	require.Empty(t, problems)
}

func under(pkg, root string) bool { return pkg == root || strings.HasPrefix(pkg, root+"/") }

// forbidden says why pkg may not import dep, or "" when it may.
func forbidden(pkg, dep string) string {
	switch {
	case strings.HasPrefix(pkg, "cmd/"):
		return ""
	case under(dep, "cmd"):
		return "nothing imports a binary"
	case under(pkg, "configs"):
		return "configs is a leaf"
	case under(dep, "configs"):
		return "only cmd/* reads configs"
	case under(dep, "policies/all"):
		return "only cmd/* registers the built-in policies"
	case pkg == "gpuworker/loadapi":
		return "gpuworker/loadapi is a leaf"
	case under(pkg, "gpuworker/fleet"):
		if under(dep, "router") {
			return "the fleet simulator may use policies and backends, never the router"
		}
		return ""
	case under(pkg, "gpuworker"):
		if under(dep, "router") || under(dep, "backends") || under(dep, "policies") {
			return "gpuworker is independent of the router side"
		}
		return ""
	case under(pkg, "backends"):
		if under(dep, "router") || under(dep, "policies") || under(dep, "gpuworker") {
			return "backends sits below router and policies"
		}
		return ""
	case under(pkg, "policies"):
		if under(dep, "router") || under(dep, "gpuworker") {
			return "policies never imports the router or the worker"
		}
		return ""
	case pkg == "router":
		if under(dep, "policies") && !contract(dep) {
			return "the router uses the policies contracts, never an implementation"
		}
		if under(dep, "gpuworker") {
			return "the router does not import the worker"
		}
		return ""
	case pkg == "router/auth":
		if dep != "policies/quota" {
			return "router/auth knows only the tenant limits contract"
		}
		return ""
	case under(pkg, "router"):
		if dep == "router/jsonscan" || dep == "router/apierror" {
			return "" // leaves any part of the router may use: bytes-only helpers, the error shape
		}
		if under(dep, "router") || under(dep, "policies") || under(dep, "backends") || under(dep, "gpuworker") {
			return "router subpackages are leaves of the router"
		}
		return ""
	}
	return ""
}

// contract reports whether a policies package holds a contract or a
// pipeline stage the router calls (routing, limits, admission) rather than
// one implementation among several (a routing policy, a store).
func contract(dep string) bool {
	return dep == "policies" || dep == "policies/quota" || dep == "policies/admission"
}

func TestForbidden(t *testing.T) {
	tests := []struct {
		pkg, dep string
		bad      bool
	}{
		{"router", "policies", false},
		{"router", "policies/p2c", true},
		{"router", "policies/quota", false},
		{"router", "policies/quota/memstore", true},
		{"router/auth", "policies/quota", false},
		{"router/auth", "backends", true},
		{"router", "backends", false},
		{"router/proxy", "router/middleware", true},
		{"backends", "policies", true},
		{"policies", "router", true},
		{"policies/p2c", "backends", false},
		{"policies/quota", "policies/store", false},
		{"gpuworker", "backends", true},
		{"gpuworker/fleet", "policies", false},
		{"gpuworker/fleet", "router", true},
		{"configs", "backends", true},
		{"router", "configs", true},
		{"cmd/sluice", "configs", false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.bad, forbidden(tt.pkg, tt.dep) != "", "%s -> %s", tt.pkg, tt.dep)
	}
}
