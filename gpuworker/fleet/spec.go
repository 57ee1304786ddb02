package fleet

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-llm/sluice/gpuworker"
)

// ErrBadSpec is wrapped by every ParseSpec error.
var ErrBadSpec = errors.New("fleet: bad fleet spec")

// Group is Count identical workers running one profile.
type Group struct {
	Count   int
	Profile gpuworker.Profile
}

// Spec is a fleet: groups of workers, in the order they were written. Worker
// indices run through the groups in that order.
type Spec []Group

// ParseSpec parses a fleet spec: comma-separated groups "COUNTxPROFILE", as
// in "4xh100-llama3-8b,8xl4-llama3-8b". A group that is a profile name by
// itself is one worker, so "2xh100-llama3-70b" is one TP2 worker and
// "3x2xh100-llama3-70b" three of them. Profiles are gpuworker's built-in
// names.
func ParseSpec(s string) (Spec, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%w: empty", ErrBadSpec)
	}
	var spec Spec
	for part := range strings.SplitSeq(s, ",") {
		g, err := parseGroup(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		spec = append(spec, g)
	}
	return spec, nil
}

// parseGroup parses one "COUNTxPROFILE" or "PROFILE" group.
func parseGroup(part string) (Group, error) {
	if p, err := gpuworker.LookupProfile(part); err == nil {
		return Group{Count: 1, Profile: p}, nil
	}
	count, name := 1, part
	if n, rest, ok := strings.Cut(part, "x"); ok {
		if c, err := strconv.Atoi(n); err == nil {
			if c < 1 {
				return Group{}, fmt.Errorf("%w: group %q: count must be at least 1", ErrBadSpec, part)
			}
			count, name = c, rest
		}
	}
	if name == "" {
		return Group{}, fmt.Errorf("%w: group %q has no profile", ErrBadSpec, part)
	}
	p, err := gpuworker.LookupProfile(name)
	if err != nil {
		return Group{}, fmt.Errorf("%w: group %q: %w", ErrBadSpec, part, err)
	}
	return Group{Count: count, Profile: p}, nil
}

// Workers returns the number of workers in the fleet.
func (s Spec) Workers() int {
	n := 0
	for _, g := range s {
		n += g.Count
	}
	return n
}

// Profiles returns one profile per worker, in worker order.
func (s Spec) Profiles() []gpuworker.Profile {
	out := make([]gpuworker.Profile, 0, s.Workers())
	for _, g := range s {
		for range g.Count {
			out = append(out, g.Profile)
		}
	}
	return out
}

// String formats the spec the way ParseSpec reads it.
func (s Spec) String() string {
	parts := make([]string, len(s))
	for i, g := range s {
		parts[i] = fmt.Sprintf("%dx%s", g.Count, g.Profile.Name)
	}
	return strings.Join(parts, ",")
}
