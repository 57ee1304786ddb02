// Package leaseset renews leases kept in Redis sorted sets, where each
// member is a lease ID and its score the lease's expiry in Unix
// milliseconds. The tenants' concurrency slots (quota/redisstore) and the
// backends' admission slots (admission/redisslots) are such sets: the
// replica holding a lease renews it while its request runs, so that a
// short TTL frees the slots of a replica that died without cutting off a
// long request of one that lives.
//
// Renewing a lease writes it whether or not the set still has it. Redis
// may lose a set under running requests (a restart without persistence,
// FLUSHALL, a failover to an empty replica), and the replica holding a
// lease is the one that knows its request still runs: the set counts the
// request again from the first renewal after Redis returns. A lease that
// expired because its replica was cut off from Redis for longer than the
// TTL is written back too, for the same reason. Until 2026-12-05 only
// leases still present were renewed, so after such a loss a tenant with
// concurrency 2 and two long streams running could start two more, and
// backends' admission budgets were over-granted the same way, for as
// long as those streams ran.
//
// The price is that a lease released while a renewal of it is under way
// comes back for a TTL. Callers close that race themselves, since only
// they know what they released: a caller stops holding a lease before it
// sends the release (ZREM), and after Renew returns (with an error too:
// the script may have run) removes again every lease it sent that it no
// longer holds. Either order then ends with the lease gone: a release
// marked before that check is removed again after the renewal ran, and
// one marked after it sends its own ZREM after the renewal answered.
package leaseset

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// renewScript: KEYS[1] a lease set; ARGV[1] the new expiry (Unix ms),
// ARGV[2] how long the set must be kept at least (ms), ARGV[3..] lease
// IDs. Every lease is written with the new expiry, present or not: one
// Redis lost is re-created (see the package doc for why, and for what the
// caller does about a lease released meanwhile). The set's key expiry is
// pushed out to ARGV[2] when shorter, so the set outlives its leases
// despite clock skew. Replies with how many leases it wrote.
const renewScript = `
if #ARGV < 3 then
  return 0
end
for i = 3, #ARGV do
  redis.call('ZADD', KEYS[1], ARGV[1], ARGV[i])
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return #ARGV - 2
`

var script = redis.NewScript(renewScript)

// Renewal is the leases of one set to renew.
type Renewal struct {
	Key string
	IDs []string
}

// Renew sets the expiry of every lease of rs to expiry (Unix ms),
// re-creating those a set no longer has, and keeps each set that holds
// one for at least keep, in one pipelined round trip (two when Redis lost
// the script). It returns how many leases it renewed; an error for one
// set leaves the others renewed. The caller must pass only leases it
// holds, and remove again those it released while Renew ran (see the
// package doc).
func Renew(ctx context.Context, c redis.UniversalClient, rs []Renewal, expiry int64, keep time.Duration) (int, error) {
	if len(rs) == 0 {
		return 0, nil
	}
	args := make([][]any, len(rs))
	for i, r := range rs {
		a := make([]any, 0, 2+len(r.IDs))
		a = append(a, expiry, keep.Milliseconds())
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

// Remove deletes the leases of rs from their sets, in one pipelined round
// trip: for a caller to take back the leases it released while Renew ran.
func Remove(ctx context.Context, c redis.UniversalClient, rs []Renewal) error {
	pipe := c.Pipeline()
	for _, r := range rs {
		if len(r.IDs) > 0 {
			pipe.ZRem(ctx, r.Key, toAny(r.IDs)...)
		}
	}
	if pipe.Len() == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("remove released leases: %w", err)
	}
	return nil
}

func toAny(ids []string) []any {
	a := make([]any, len(ids))
	for i, id := range ids {
		a[i] = id
	}
	return a
}
