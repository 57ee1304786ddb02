package auth_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/router/auth"
)

func TestAuthenticate(t *testing.T) {
	a := &auth.Tenant{Name: "a"}
	b := &auth.Tenant{Name: "b", Models: []string{"m1"}}
	dir, err := auth.NewDirectory([]*auth.Tenant{a, b},
		[][]auth.Digest{{auth.HashKey("sk-a1"), auth.HashKey("sk-a2")}, {auth.HashKey("sk-b")}})
	require.NoError(t, err)
	assert.False(t, dir.Open())

	tests := []struct {
		name   string
		header string
		value  string
		want   *auth.Tenant
		err    error
	}{
		{"bearer", "Authorization", "Bearer sk-a1", a, nil},
		{"second key", "Authorization", "Bearer sk-a2", a, nil},
		{"scheme in any case", "Authorization", "bearer sk-b", b, nil},
		{"azure api-key", "Api-Key", "sk-b", b, nil},
		{"wrong key", "Authorization", "Bearer sk-c", nil, auth.ErrInvalidKey},
		{"no key", "", "", nil, auth.ErrMissingKey},
		{"basic auth", "Authorization", "Basic c2stYTE=", nil, auth.ErrMissingKey},
		{"empty bearer", "Authorization", "Bearer ", nil, auth.ErrMissingKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := http.NewRequest(http.MethodGet, "/", nil)
			require.NoError(t, err)
			if tt.header != "" {
				r.Header.Set(tt.header, tt.value)
			}
			got, err := dir.Authenticate(r)
			assert.ErrorIs(t, err, tt.err)
			assert.Same(t, tt.want, got)
		})
	}
	assert.True(t, a.Allows("anything"))
	assert.True(t, b.Allows("m1"))
	assert.False(t, b.Allows("m2"))
}

func TestDirectoryRules(t *testing.T) {
	var open *auth.Directory
	assert.True(t, open.Open())
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	got, err := open.Authenticate(r)
	assert.NoError(t, err)
	assert.Nil(t, got, "open: no key asked for")

	k := auth.HashKey("sk-x")
	_, err = auth.NewDirectory([]*auth.Tenant{{Name: "a"}, {Name: "b"}}, [][]auth.Digest{{k}, {k}})
	assert.ErrorContains(t, err, `tenants "a" and "b" share a key`)
	_, err = auth.NewDirectory([]*auth.Tenant{{Name: "a"}}, [][]auth.Digest{{}})
	assert.ErrorContains(t, err, "no key")
}

func TestWithTenant(t *testing.T) {
	a := &auth.Tenant{Name: "a", Tier: "pro"}
	b := &auth.Tenant{Name: "b"}
	dir, err := auth.NewDirectory([]*auth.Tenant{a, b},
		[][]auth.Digest{{auth.HashKey("sk-a")}, {auth.HashKey("sk-b")}})
	require.NoError(t, err)

	tests := []struct {
		name   string
		as     *auth.Tenant
		header string
		want   *auth.Tenant
		err    error
	}{
		{"the directory's tenant of that name", &auth.Tenant{Name: "a"}, "", a, nil},
		{"before any header", &auth.Tenant{Name: "a"}, "Bearer sk-b", a, nil},
		{"a tenant gone since", &auth.Tenant{Name: "gone"}, "Bearer sk-b", nil, auth.ErrInvalidKey},
		{"none: the key decides", nil, "Bearer sk-b", b, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := http.NewRequest(http.MethodGet, "/", nil)
			require.NoError(t, err)
			if tt.as != nil {
				r = r.WithContext(auth.WithTenant(r.Context(), tt.as))
			}
			if tt.header != "" {
				r.Header.Set("Authorization", tt.header)
			}
			got, err := dir.Authenticate(r)
			assert.ErrorIs(t, err, tt.err)
			assert.Same(t, tt.want, got)
		})
	}
	var open *auth.Directory
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	got, err := open.Authenticate(r.WithContext(auth.WithTenant(r.Context(), a)))
	assert.NoError(t, err)
	assert.Nil(t, got, "open: no tenant, as without it")
	assert.Same(t, a, auth.TenantFrom(auth.WithTenant(r.Context(), a)))
	assert.Nil(t, auth.TenantFrom(r.Context()))
}
