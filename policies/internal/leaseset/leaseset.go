// Package leaseset renews leases kept in Redis sorted sets, where each
// member is a lease ID and its score the lease's expiry in Unix
// milliseconds. The tenants' concurrency slots (quota/redisstore) and the
// backends' admission slots (admission/redisslots) are such sets: the
// replica holding a lease renews it while its request runs, so that a
// short TTL frees the slots of a replica that died without cutting off a
// long request of one that lives.
package leaseset

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// renewScript: KEYS[1] a lease set; ARGV[1] now and ARGV[2] the new
// expiry (Unix ms), ARGV[3] how long the set must be kept at least (ms),
// ARGV[4..] lease IDs. Only leases still live are renewed: one released
// or expired meanwhile stays gone. Replies with how many were renewed.
const renewScript = `
local now, n = tonumber(ARGV[1]), 0
for i = 4, #ARGV do
  local exp = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if exp and tonumber(exp) > now then
    redis.call('ZADD', KEYS[1], ARGV[2], ARGV[i])
    n = n + 1
  end
end
if n > 0 and redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return n
`

var script = redis.NewScript(renewScript)

// Renewal is the leases of one set to renew.
type Renewal struct {
	Key string
	IDs []string
}

// Renew moves the expiry of every lease of rs live at now (Unix ms) to
// expiry (Unix ms) and keeps each set that holds one for at least keep, in one
// pipelined round trip (two when Redis lost the script). It returns how
// many leases were renewed; an error for one set leaves the others
// renewed.
func Renew(ctx context.Context, c redis.UniversalClient, rs []Renewal, now, expiry int64, keep time.Duration) (int, error) {
	if len(rs) == 0 {
		return 0, nil
	}
	args := make([][]any, len(rs))
	for i, r := range rs {
		a := make([]any, 0, 3+len(r.IDs))
		a = append(a, now, expiry, keep.Milliseconds())
		for _, id := range r.IDs {
			a = append(a, id)
		}
		args[i] = a
	}
	cmds := make([]*redis.Cmd, len(rs))
	pipe := c.Pipeline()
	for i, r := range rs {
		cmds[i] = script.EvalSha(ctx, pipe, []string{r.Key}, args[i]...)
	}
	_, _ = pipe.Exec(ctx) // each command's error is read below
	var missing []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		pipe = c.Pipeline()
		for _, i := range missing {
			cmds[i] = script.Eval(ctx, pipe, []string{rs[i].Key}, args[i]...)
		}
		_, _ = pipe.Exec(ctx)
	}
	renewed := 0
	var errs []error
	for i, cmd := range cmds {
		n, err := cmd.Int()
		if err != nil {
			errs = append(errs, fmt.Errorf("renew %s: %w", rs[i].Key, err))
			continue
		}
		renewed += n
	}
	return renewed, errors.Join(errs...)
}
