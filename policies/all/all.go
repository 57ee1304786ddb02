// Package all is the one list of Sluice's built-in routing policies. main
// calls Register on the registry it builds; nothing registers itself.
package all

import (
	"errors"

	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/leastrequest"
	"github.com/sluice-llm/sluice/policies/p2c"
	"github.com/sluice-llm/sluice/policies/prefixaffinity"
	"github.com/sluice-llm/sluice/policies/queuedepth"
	"github.com/sluice-llm/sluice/policies/random"
	"github.com/sluice-llm/sluice/policies/roundrobin"
	"github.com/sluice-llm/sluice/policies/scored"
	"github.com/sluice-llm/sluice/policies/sessionaffinity"
	"github.com/sluice-llm/sluice/policies/tokenspersec"
	"github.com/sluice-llm/sluice/policies/weighted"
)

// Register adds every built-in policy to reg.
func Register(reg *policies.Registry) error {
	return errors.Join(
		reg.Register(roundrobin.Name, roundrobin.New),
		reg.Register(random.Name, random.New),
		reg.Register(weighted.Name, weighted.New),
		reg.Register(leastrequest.Name, leastrequest.New),
		reg.Register(p2c.Name, p2c.New),
		reg.Register(queuedepth.Name, queuedepth.New),
		reg.Register(tokenspersec.Name, tokenspersec.New),
		reg.Register(prefixaffinity.Name, prefixaffinity.New),
		reg.Register(sessionaffinity.Name, sessionaffinity.New),
		reg.Register(scored.Name, scored.New),
	)
}
