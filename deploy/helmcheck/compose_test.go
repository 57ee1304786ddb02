package helmcheck

import (
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestComposeConfig checks deploy/compose: `sluice validate` accepts its
// config, every backend and the Redis it names is one of the compose
// file's services listening there, admission.replicas counts the Sluice
// services, every long-running service has a healthcheck, the Batch API is
// on and shared through Redis, with its data_dir on a named volume every
// Sluice service mounts (the root file system is read-only), and the tiers
// and tenants are configs/demo.yaml's, as the config says. (Running the
// file needs Docker and base images; docker compose config is not run
// here.)
func TestComposeConfig(t *testing.T) {
	const dir = "../compose"
	raw, err := os.ReadFile(dir + "/config/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	validate(t, string(raw), nil)
	var cfg struct {
		Models []struct {
			Admission struct {
				Replicas int `json:"replicas"`
			} `json:"admission"`
			Backends []struct {
				URL string `json:"url"`
			} `json:"backends"`
		} `json:"models"`
		Limits struct {
			RedisURL string `json:"redis_url"`
		} `json:"limits"`
		Batch struct {
			Enabled bool   `json:"enabled"`
			Store   string `json:"store"`
			DataDir string `json:"data_dir"`
		} `json:"batch"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}

	b, err := os.ReadFile(dir + "/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Command     []string          `json:"command"`
			Entrypoint  []string          `json:"entrypoint"`
			Volumes     []string          `json:"volumes"`
			Healthcheck *struct{}         `json:"healthcheck"`
			Profiles    []string          `json:"profiles"`
			Environment map[string]string `json:"environment"`
		} `json:"services"`
		Volumes map[string]any `json:"volumes"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatal(err)
	}
	// listening maps host:port to the service that listens there.
	listening := map[string]string{"redis:6379": "redis"}
	var sluices []string
	for name, s := range compose.Services {
		if len(s.Profiles) == 0 && s.Healthcheck == nil {
			t.Errorf("service %s has no healthcheck", name)
		}
		for i, arg := range s.Command {
			if arg == "--listen" && i+1 < len(s.Command) {
				listening[name+":"+strings.TrimPrefix(s.Command[i+1], "0.0.0.0:")] = name
			}
		}
		if len(s.Entrypoint) == 0 && slices.Contains(s.Command, "/etc/sluice/sluice.yaml") {
			sluices = append(sluices, name)
			if !slices.Contains(s.Volumes, "./config:/etc/sluice:ro") {
				t.Errorf("service %s does not mount ./config at /etc/sluice: %v", name, s.Volumes)
			}
			if !slices.ContainsFunc(s.Volumes, func(v string) bool {
				vol, path, _ := strings.Cut(v, ":")
				_, named := compose.Volumes[vol]
				return named && path == cfg.Batch.DataDir
			}) {
				t.Errorf("service %s mounts no named volume at batch.data_dir %q, writable: %v", name, cfg.Batch.DataDir, s.Volumes)
			}
		}
	}
	if len(sluices) < 2 {
		t.Fatalf("Sluice services %v, want at least two replicas", sluices)
	}
	if !cfg.Batch.Enabled || cfg.Batch.Store != "redis" {
		t.Errorf("batch: enabled %v, store %q: want the Batch API on, its batches shared by the replicas through Redis",
			cfg.Batch.Enabled, cfg.Batch.Store)
	}
	checkSameTenants(t, raw, "../../configs/demo.yaml")
	hosts := []string{cfg.Limits.RedisURL}
	for _, m := range cfg.Models {
		if m.Admission.Replicas != len(sluices) {
			t.Errorf("admission.replicas = %d, but %d Sluice services share the budgets", m.Admission.Replicas, len(sluices))
		}
		for _, be := range m.Backends {
			hosts = append(hosts, be.URL)
		}
	}
	for _, h := range hosts {
		u, err := url.Parse(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := listening[u.Host]; !ok {
			t.Errorf("%s: no service listens on %s (have %v)", h, u.Host, listening)
		}
	}
}

// checkSameTenants checks that the config raw has the tiers and tenants of
// the config file at path.
func checkSameTenants(t *testing.T, raw []byte, path string) {
	t.Helper()
	other, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type tenants struct {
		Tiers   []map[string]any `json:"tiers"`
		Tenants []map[string]any `json:"tenants"`
	}
	var got, want tenants
	if err := yaml.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(other, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the tiers and tenants differ from %s's:\n got %v\nwant %v", path, got, want)
	}
}
