// Package all is the one list of Sluice's built-in routing policies. main
// calls Register on the registry it builds; nothing registers itself.
package all

import (
	"errors"

	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/leastrequest"
	"github.com/sluice-llm/sluice/policies/roundrobin"
)

// Register adds every built-in policy to reg.
func Register(reg *policies.Registry) error {
	return errors.Join(
		reg.Register(roundrobin.Name, roundrobin.New),
		reg.Register(leastrequest.Name, leastrequest.New),
	)
}
