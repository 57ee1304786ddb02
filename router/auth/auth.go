package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/sluice-llm/sluice/policies/quota"
)

// Tenant is one configured tenant with its tier's limits already merged
// with its own overrides.
type Tenant struct {
	// Name is the tenant's config name; it keys its limits in the Store.
	Name string
	// Tier names its quota tier.
	Tier string
	// Priority is the tier's priority: higher is served first.
	Priority int
	// Limits are the tenant's effective limits.
	Limits quota.Limits
	// DefaultMaxTokens is the output reserved for a request that sets no
	// max_tokens.
	DefaultMaxTokens int
	// Models lists the models the tier may use; empty means all.
	Models []string
	// Classes lists the service classes the tier may ask for (priority,
	// default, flex); empty means all. DefaultClass is the class of a
	// request that names none ("default" when empty).
	Classes      []string
	DefaultClass string
	// Weight is the tenant's share against the other tenants of its tier
	// and class while they wait for admission (at least 1).
	Weight int
}

// Allows reports whether the tenant's tier may use model.
func (t *Tenant) Allows(model string) bool {
	if len(t.Models) == 0 {
		return true
	}
	for _, m := range t.Models {
		if m == model {
			return true
		}
	}
	return false
}

// Digest is the SHA-256 of an API key.
type Digest [sha256.Size]byte

// HashKey returns the digest of key.
func HashKey(key string) Digest { return sha256.Sum256([]byte(key)) }

// Directory maps key digests to tenants. Build it with NewDirectory; it is
// immutable and safe for concurrent use.
type Directory struct {
	byKey   map[Digest]entry
	byName  map[string]*Tenant
	tenants []*Tenant
}

type entry struct {
	tenant *Tenant
	digest Digest
}

// NewDirectory indexes tenants by the digests in keys (keys[i] are the
// digests of tenants[i]). A digest listed twice is an error.
func NewDirectory(tenants []*Tenant, keys [][]Digest) (*Directory, error) {
	if len(tenants) != len(keys) {
		return nil, errors.New("auth: one key list per tenant")
	}
	d := &Directory{byKey: map[Digest]entry{}, byName: make(map[string]*Tenant, len(tenants)), tenants: tenants}
	for i, t := range tenants {
		d.byName[t.Name] = t
		if len(keys[i]) == 0 {
			return nil, fmt.Errorf("auth: tenant %q has no key", t.Name)
		}
		for _, k := range keys[i] {
			if other, dup := d.byKey[k]; dup {
				return nil, fmt.Errorf("auth: tenants %q and %q share a key", other.tenant.Name, t.Name)
			}
			d.byKey[k] = entry{tenant: t, digest: k}
		}
	}
	return d, nil
}

// Open reports whether the directory has no tenants, so that every request
// is served without a key.
func (d *Directory) Open() bool { return d == nil || len(d.tenants) == 0 }

// Tenants lists the tenants, in config order.
func (d *Directory) Tenants() []*Tenant {
	if d == nil {
		return nil
	}
	return d.tenants
}

// ErrMissingKey and ErrInvalidKey are Authenticate's refusals.
var (
	ErrMissingKey = errors.New("auth: no API key")
	ErrInvalidKey = errors.New("auth: incorrect API key")
)

// Authenticate returns the tenant whose key r carries as a bearer token
// (Authorization: Bearer KEY, or an api-key header as Azure's SDKs send
// it), nil for an open directory, or ErrMissingKey / ErrInvalidKey.
//
// A request whose context carries a tenant (WithTenant) is that tenant's
// without any key: the directory's tenant of that name, so limits changed
// by a reload apply; ErrInvalidKey when no tenant has that name any more.
//
// The key's digest is looked up in a map: the map's timing depends on the
// digest, which an attacker cannot steer towards a valid key's without
// the key itself; the final comparison is constant-time.
func (d *Directory) Authenticate(r *http.Request) (*Tenant, error) {
	if d.Open() {
		return nil, nil
	}
	if t := TenantFrom(r.Context()); t != nil {
		if cur := d.byName[t.Name]; cur != nil {
			return cur, nil
		}
		return nil, ErrInvalidKey
	}
	key := BearerToken(r.Header.Get("Authorization"))
	if key == "" {
		key = strings.TrimSpace(r.Header.Get("Api-Key"))
	}
	if key == "" {
		return nil, ErrMissingKey
	}
	dg := HashKey(key)
	e, ok := d.byKey[dg]
	if !ok || subtle.ConstantTimeCompare(e.digest[:], dg[:]) != 1 {
		return nil, ErrInvalidKey
	}
	return e.tenant, nil
}

// BearerToken is the token of an "Authorization: Bearer TOKEN" value (the
// scheme's case free, spaces trimmed), "" for any other.
func BearerToken(h string) string {
	const p = "Bearer "
	if len(h) > len(p) && strings.EqualFold(h[:len(p)], p) {
		return strings.TrimSpace(h[len(p):])
	}
	return ""
}

type tenantKey struct{}

// WithTenant returns a copy of ctx under which Authenticate takes a
// request as t's (by name) before reading any header. It exists for
// in-process callers that run requests on a tenant's behalf (the batch
// runner), and for the router to pass the authenticated tenant to the
// handlers it mounts. A context cannot cross the process boundary, so no
// client can set it.
func WithTenant(ctx context.Context, t *Tenant) context.Context {
	return context.WithValue(ctx, tenantKey{}, t)
}

// TenantFrom returns the tenant WithTenant put in ctx, or nil.
func TenantFrom(ctx context.Context) *Tenant {
	t, _ := ctx.Value(tenantKey{}).(*Tenant)
	return t
}
