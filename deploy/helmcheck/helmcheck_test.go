package helmcheck

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const (
	chartDir = "../helm/sluice"
	release  = "edge" // objects are named edge-sluice
	fullname = "edge-sluice"
	// kube is the cluster version rendered for, as the k8s.io/api version
	// (a go tool helm has no version linked in and would assume 1.20).
	kube = "v1.37.0"
)

// sluiceBin is the real sluice binary: $SLUICE_BIN, or one TestMain builds
// from the repository root.
var sluiceBin string

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	if sluiceBin = os.Getenv("SLUICE_BIN"); sluiceBin != "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "helmcheck")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	sluiceBin = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", sluiceBin, "./cmd/sluice")
	build.Dir = "../.."
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building sluice: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// Keys the test values hash; none of them may appear in what the chart renders.
var rawKeys = []string{"sk-helmcheck-alpha", "sk-helmcheck-beta"}

func digest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// tenantValues sets a model whose second backend takes its key from
// VLLM_API_KEY, tiers and two tenants (their keys as digests).
func tenantValues() string {
	return fmt.Sprintf(`
config:
  models:
    - name: llama-3-8b
      admission: {max_in_flight_per_backend: 8, max_wait: {priority: 5s}}
      backends:
        - url: http://vllm-0.vllm:8000
          max_in_flight: 32
        - url: http://vllm-1.vllm:8000
          api_key_env: VLLM_API_KEY
  tiers:
    - name: free
      requests_per_minute: 60
      requests_burst: 10
      tokens_per_day: 5000000
      models: [llama-3-8b]
    - name: pro
      requests_per_minute: 600
      concurrent_requests: 32
      priority: 1
  tenants:
    - name: alpha
      tier: free
      api_keys: [%q]
    - name: beta
      tier: pro
      weight: 2
      api_keys: [%q]
  limits: {fail_open: false, timeout: 100ms}
`, digest(rawKeys[0]), digest(rawKeys[1]))
}

func TestChartRenders(t *testing.T) {
	tests := []struct {
		name   string
		values string
		// kube is the Kubernetes version rendered for.
		kube string
		// preStop is whether the container sleeps before SIGTERM (1.30 on).
		preStop bool
		// kinds lists every object expected, as "Kind/name", sorted.
		kinds []string
		// replicas is the Deployment's replica count (0: none, the HPA owns it).
		replicas int32
		// admission is each model's admission.replicas in the config.
		admission float64
		// servicePorts names the Service's ports.
		servicePorts []string
		// secretKeys are the env Secret's keys (none: no Secret made).
		secretKeys []string
		// envSecret is the Secret named by the pods' envFrom ("": none).
		envSecret string
		// adminListen is the config's admin.listen ("": left out).
		adminListen string
		// configIn is the object holding sluice.yaml.
		configIn string
		// tenants is how many tenants the config has.
		tenants int
		// batchVolume is what backs batch.data_dir: "" (the Batch API is
		// off: no volume), "emptyDir", or the PersistentVolumeClaim's name.
		batchVolume string
		// metricsTokenKey is the Secret key the ServiceMonitor sends as
		// the bearer token ("": it sends none).
		metricsTokenKey string
		// warnings are words from each warning NOTES.txt must give, one
		// entry per warning (a warning begins "WARNING:"); none: it gives none.
		warnings []string
		// tlsSecret is the kubernetes.io/tls Secret the pods serve HTTPS
		// with ("": plain HTTP).
		tlsSecret string
	}{
		{
			name:    "defaults",
			values:  "",
			kube:    kube,
			preStop: true,
			kinds: []string{"ConfigMap/" + fullname, "Deployment/" + fullname, "HorizontalPodAutoscaler/" + fullname,
				"PodDisruptionBudget/" + fullname, "Service/" + fullname, "ServiceMonitor/" + fullname},
			admission:    6,
			servicePorts: []string{"http"},
			configIn:     "ConfigMap/" + fullname,
			warnings:     []string{"up to 6 pods and no Redis"},
		},
		{
			name: "admin, tenants, redis, no autoscaling, no ServiceMonitor",
			values: tenantValues() + `
admin: {enabled: true, token: admin-token-123}
secrets: {redisUrl: "redis://:pw@redis:6379/0", backendApiKeys: {VLLM_API_KEY: vllm-secret}}
autoscaling: {enabled: false}
serviceMonitor: {enabled: false}
replicaCount: 3
restartOnConfigChange: true
`,
			kube:    kube,
			preStop: true,
			kinds: []string{"ConfigMap/" + fullname, "Deployment/" + fullname, "PodDisruptionBudget/" + fullname,
				"Secret/" + fullname, "Service/" + fullname},
			replicas:     3,
			admission:    3,
			servicePorts: []string{"http", "admin"},
			secretKeys:   []string{"SLUICE_ADMIN_TOKEN", "SLUICE_REDIS_URL", "VLLM_API_KEY"},
			envSecret:    fullname,
			adminListen:  "0.0.0.0:8081",
			configIn:     "ConfigMap/" + fullname,
			tenants:      2,
		},
		{
			name: "config in a Secret, the Batch API on emptyDirs",
			values: tenantValues() + `
  batch: {enabled: true}
configInSecret: true
secrets: {backendApiKeys: {VLLM_API_KEY: vllm-secret}}
podDisruptionBudget: {enabled: false}
`,
			kube:    kube,
			preStop: true,
			kinds: []string{"Deployment/" + fullname, "HorizontalPodAutoscaler/" + fullname, "Secret/" + fullname,
				"Secret/" + fullname + "-config", "Service/" + fullname, "ServiceMonitor/" + fullname},
			admission:    6,
			servicePorts: []string{"http"},
			secretKeys:   []string{"VLLM_API_KEY"},
			envSecret:    fullname,
			configIn:     "Secret/" + fullname + "-config",
			tenants:      2,
			batchVolume:  "emptyDir",
			warnings: []string{"up to 6 pods and no Redis", "Batch API on up to 6 pods that do not share batches",
				"each pod's emptyDir"},
		},
		{
			name: "the Batch API on a shared claim, a metrics token",
			values: `
config:
  models:
    - name: llama-3-8b
      admission: {max_in_flight_per_backend: 8}
      backends: [{url: "http://vllm-0.vllm:8000"}]
  metrics_token_env: METRICS_TOKEN
  batch: {enabled: true, store: redis}
secrets: {redisUrl: "redis://redis:6379/0", metricsToken: metrics-secret}
batchData: {existingClaim: sluice-batch}
strategy: {type: Recreate}
`,
			kube:    kube,
			preStop: true,
			kinds: []string{"ConfigMap/" + fullname, "Deployment/" + fullname, "HorizontalPodAutoscaler/" + fullname,
				"PodDisruptionBudget/" + fullname, "Secret/" + fullname, "Service/" + fullname, "ServiceMonitor/" + fullname},
			admission:       6,
			servicePorts:    []string{"http"},
			secretKeys:      []string{"METRICS_TOKEN", "SLUICE_REDIS_URL"},
			envSecret:       fullname,
			configIn:        "ConfigMap/" + fullname,
			batchVolume:     "sluice-batch",
			metricsTokenKey: "METRICS_TOKEN",
		},
		{
			name: "the Batch API in one pod",
			values: `
config:
  batch: {enabled: true}
autoscaling: {enabled: false}
replicaCount: 1
`,
			kube:    kube,
			preStop: true,
			kinds: []string{"ConfigMap/" + fullname, "Deployment/" + fullname,
				"PodDisruptionBudget/" + fullname, "Service/" + fullname, "ServiceMonitor/" + fullname},
			replicas:     1,
			admission:    1,
			servicePorts: []string{"http"},
			configIn:     "ConfigMap/" + fullname,
			batchVolume:  "emptyDir",
			warnings:     []string{"each pod's emptyDir"},
		},
		{
			name: "existing Secret",
			values: `
admin: {enabled: true}
secrets: {existingSecret: sluice-env, metricsTokenInExistingSecret: true}
`,
			kube: "v1.29.5",
			kinds: []string{"ConfigMap/" + fullname, "Deployment/" + fullname, "HorizontalPodAutoscaler/" + fullname,
				"PodDisruptionBudget/" + fullname, "Service/" + fullname, "ServiceMonitor/" + fullname},
			admission:       6,
			servicePorts:    []string{"http", "admin"},
			envSecret:       "sluice-env",
			adminListen:     "0.0.0.0:8081",
			configIn:        "ConfigMap/" + fullname,
			metricsTokenKey: "SLUICE_METRICS_TOKEN",
			warnings:        []string{"unless Secret sluice-env holds SLUICE_REDIS_URL"},
		},
		{
			name: "HTTPS from a cert-manager Secret, on both ports",
			values: `
tls: {secretName: sluice-tls}
admin: {enabled: true, token: admin-token-123}
serviceMonitor: {tlsConfig: {serverName: sluice.example.com, ca: {secret: {name: sluice-tls, key: ca.crt}}}}
`,
			kube:    kube,
			preStop: true,
			kinds: []string{"ConfigMap/" + fullname, "Deployment/" + fullname, "HorizontalPodAutoscaler/" + fullname,
				"PodDisruptionBudget/" + fullname, "Secret/" + fullname, "Service/" + fullname, "ServiceMonitor/" + fullname},
			admission:    6,
			servicePorts: []string{"http", "admin"},
			secretKeys:   []string{"SLUICE_ADMIN_TOKEN"},
			envSecret:    fullname,
			adminListen:  "0.0.0.0:8081",
			configIn:     "ConfigMap/" + fullname,
			warnings:     []string{"up to 6 pods and no Redis"},
			tlsSecret:    "sluice-tls",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			manifest, notes, err := render(t, tt.values, tt.kube)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(notes, "WARNING:"); n != len(tt.warnings) {
				t.Errorf("NOTES.txt gives %d warnings, want %d (%q):\n%s", n, len(tt.warnings), tt.warnings, notes)
			}
			for _, w := range tt.warnings {
				if !strings.Contains(strings.Join(strings.Fields(notes), " "), w) {
					t.Errorf("NOTES.txt does not warn %q:\n%s", w, notes)
				}
			}
			objs := decodeAll(t, manifest)
			if got := slices.Sorted(maps.Keys(objs)); !slices.Equal(got, tt.kinds) {
				t.Fatalf("objects:\n got %v\nwant %v", got, tt.kinds)
			}
			for _, key := range rawKeys {
				if strings.Contains(manifest, key) {
					t.Errorf("the manifests hold the raw tenant key %q", key)
				}
			}

			dep := objs["Deployment/"+fullname].(*appsv1.Deployment)
			pod := dep.Spec.Template
			checkDeployment(t, dep)
			if tt.replicas == 0 && dep.Spec.Replicas != nil {
				t.Errorf("Deployment replicas = %d; the HPA owns the count", *dep.Spec.Replicas)
			}
			if tt.replicas != 0 && (dep.Spec.Replicas == nil || *dep.Spec.Replicas != tt.replicas) {
				t.Errorf("Deployment replicas = %v, want %d", dep.Spec.Replicas, tt.replicas)
			}
			c := pod.Spec.Containers[0]
			if sleeps := c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil; sleeps != tt.preStop {
				t.Errorf("preStop sleep = %v, want %v on Kubernetes %s", sleeps, tt.preStop, tt.kube)
			}
			var envFrom []string
			for _, e := range c.EnvFrom {
				envFrom = append(envFrom, e.SecretRef.Name)
			}
			var wantEnvFrom []string
			if tt.envSecret != "" {
				wantEnvFrom = []string{tt.envSecret}
			}
			if !slices.Equal(envFrom, wantEnvFrom) {
				t.Errorf("envFrom Secrets = %v, want %v", envFrom, wantEnvFrom)
			}

			svc := objs["Service/"+fullname].(*corev1.Service)
			checkSelects(t, "Service", labels.SelectorFromSet(svc.Spec.Selector), pod.Labels)
			var svcPorts []string
			for _, p := range svc.Spec.Ports {
				svcPorts = append(svcPorts, p.Name)
				if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool {
					return cp.Name == p.TargetPort.StrVal && cp.ContainerPort == p.Port
				}) {
					t.Errorf("Service port %s targets %q, which is not a container port numbered %d", p.Name, p.TargetPort.String(), p.Port)
				}
			}
			if !slices.Equal(svcPorts, tt.servicePorts) {
				t.Errorf("Service ports = %v, want %v", svcPorts, tt.servicePorts)
			}

			if o, ok := objs["HorizontalPodAutoscaler/"+fullname]; ok {
				hpa := o.(*autoscalingv2.HorizontalPodAutoscaler)
				if r := hpa.Spec.ScaleTargetRef; r.Kind != "Deployment" || r.APIVersion != "apps/v1" || r.Name != dep.Name {
					t.Errorf("HPA scales %+v, not the Deployment", r)
				}
				if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas < 1 || *hpa.Spec.MinReplicas > hpa.Spec.MaxReplicas {
					t.Errorf("HPA replicas %v..%d", hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas)
				}
			}
			if o, ok := objs["PodDisruptionBudget/"+fullname]; ok {
				pdb := o.(*policyv1.PodDisruptionBudget)
				checkSelects(t, "PodDisruptionBudget", mustSelector(t, pdb.Spec.Selector), pod.Labels)
			}
			if o, ok := objs["ServiceMonitor/"+fullname]; ok {
				sm := o.(*serviceMonitor)
				checkSelects(t, "ServiceMonitor", mustSelector(t, &sm.Spec.Selector), svc.Labels)
				if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
					t.Fatalf("ServiceMonitor endpoints = %+v, want the Service's http port, /metrics", sm.Spec.Endpoints)
				}
				checkScrapeAuth(t, sm.Spec.Endpoints[0].Authorization, tt.envSecret, tt.metricsTokenKey)
				if ep, https := sm.Spec.Endpoints[0], tt.tlsSecret != ""; (ep.Scheme == "https") != https || https && (ep.TLSConfig == nil || ep.TLSConfig.ServerName == "") {
					t.Errorf("ServiceMonitor scheme %q, tlsConfig %+v; want https with the values' tlsConfig only with TLS", ep.Scheme, ep.TLSConfig)
				}
			} else if tt.metricsTokenKey != "" {
				t.Errorf("no ServiceMonitor to send the metrics token %s", tt.metricsTokenKey)
			}

			env := map[string]string{}
			if len(tt.secretKeys) > 0 {
				sec := objs["Secret/"+fullname].(*corev1.Secret)
				if got := slices.Sorted(maps.Keys(sec.Data)); !slices.Equal(got, tt.secretKeys) {
					t.Errorf("Secret keys = %v, want %v", got, tt.secretKeys)
				}
				if pod.Annotations["checksum/secret"] == "" {
					t.Error("the pod template has no checksum/secret: a changed Secret would not roll the pods")
				}
				for k, v := range sec.Data {
					env[k] = string(v)
				}
			}

			cfgText := configText(t, objs[tt.configIn])
			var cfg struct {
				Listen string   `json:"listen"`
				TLS    tlsFiles `json:"tls"`
				Admin  struct {
					Listen   string   `json:"listen"`
					TokenEnv string   `json:"token_env"`
					TLS      tlsFiles `json:"tls"`
				} `json:"admin"`
				Models []struct {
					Admission struct {
						Replicas float64 `json:"replicas"`
					} `json:"admission"`
				} `json:"models"`
				Tenants []struct {
					APIKeys []string `json:"api_keys"`
				} `json:"tenants"`
				Batch struct {
					DataDir string `json:"data_dir"`
				} `json:"batch"`
			}
			if err := yaml.Unmarshal([]byte(cfgText), &cfg); err != nil {
				t.Fatalf("the rendered config: %v", err)
			}
			if cfg.Listen != "0.0.0.0:8080" {
				t.Errorf("listen = %q, want 0.0.0.0:8080", cfg.Listen)
			}
			if cfg.Admin.Listen != tt.adminListen {
				t.Errorf("admin.listen = %q, want %q", cfg.Admin.Listen, tt.adminListen)
			}
			if tt.adminListen != "" && cfg.Admin.TokenEnv != "SLUICE_ADMIN_TOKEN" {
				t.Errorf("admin.token_env = %q, want SLUICE_ADMIN_TOKEN", cfg.Admin.TokenEnv)
			}
			for i, m := range cfg.Models {
				if m.Admission.Replicas != tt.admission {
					t.Errorf("models[%d].admission.replicas = %g, want %g", i, m.Admission.Replicas, tt.admission)
				}
			}
			if len(cfg.Tenants) != tt.tenants {
				t.Errorf("%d tenants, want %d", len(cfg.Tenants), tt.tenants)
			}
			for i, tn := range cfg.Tenants {
				if !slices.Equal(tn.APIKeys, []string{digest(rawKeys[i])}) {
					t.Errorf("tenants[%d].api_keys = %v, want the digest of %s", i, tn.APIKeys, rawKeys[i])
				}
			}
			checkBatchVolume(t, pod.Spec, cfg.Batch.DataDir, tt.batchVolume)
			checkTLS(t, pod.Spec, cfg.TLS, tt.tlsSecret)
			if tt.adminListen != "" {
				checkTLS(t, pod.Spec, cfg.Admin.TLS, tt.tlsSecret)
			}
			validate(t, cfgText, env)
		})
	}
}

// checkBatchVolume checks that batch.data_dir (dir, "" for the default)
// is on a writable volume of the kind want names ("emptyDir" or a claim's
// name), the root file system being read-only, and that without the Batch
// API (want "") neither is there.
func checkBatchVolume(t *testing.T, pod corev1.PodSpec, dir, want string) {
	t.Helper()
	var mount *corev1.VolumeMount
	for i, m := range pod.Containers[0].VolumeMounts {
		if m.MountPath != "/etc/sluice" && m.MountPath != tlsDir {
			mount = &pod.Containers[0].VolumeMounts[i]
		}
	}
	if want == "" {
		if dir != "" || mount != nil {
			t.Errorf("the Batch API is off, yet batch.data_dir = %q and a mount %+v", dir, mount)
		}
		return
	}
	if mount == nil || mount.MountPath != dir || mount.ReadOnly || mount.SubPath != "" {
		t.Fatalf("batch.data_dir %q, mounts %+v: want a writable volume mounted there", dir, pod.Containers[0].VolumeMounts)
	}
	i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name })
	if i < 0 {
		t.Fatalf("the pod has no volume %q", mount.Name)
	}
	got := ""
	switch v := pod.Volumes[i].VolumeSource; {
	case v.EmptyDir != nil:
		got = "emptyDir"
	case v.PersistentVolumeClaim != nil && !v.PersistentVolumeClaim.ReadOnly:
		got = v.PersistentVolumeClaim.ClaimName
	}
	if got != want {
		t.Errorf("batch.data_dir is on %+v, want %s", pod.Volumes[i].VolumeSource, want)
	}
}

// tlsDir is where the chart mounts tls.secretName.
const tlsDir = "/etc/sluice-tls"

// tlsFiles is a listener's tls block in the rendered config.
type tlsFiles struct {
	CertFile string `json:"cert_file"`
	KeyFile  string `json:"key_file"`
}

// checkTLS checks that with a TLS Secret (secret) the listener's files are
// its tls.crt and tls.key, mounted read-only from it as a directory (a
// subPath would never see a renewal), and the probes use HTTPS; without
// one, none of that is there.
func checkTLS(t *testing.T, pod corev1.PodSpec, files tlsFiles, secret string) {
	t.Helper()
	c := pod.Containers[0]
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		want := corev1.URISchemeHTTP
		if secret != "" {
			want = corev1.URISchemeHTTPS
		}
		if got := cmp.Or(p.HTTPGet.Scheme, corev1.URISchemeHTTP); got != want {
			t.Errorf("probe %s scheme %s, want %s", p.HTTPGet.Path, got, want)
		}
	}
	mounted := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == tlsDir })
	if secret == "" {
		if files != (tlsFiles{}) || mounted >= 0 {
			t.Errorf("no TLS Secret, yet tls %+v and mounts %+v", files, c.VolumeMounts)
		}
		return
	}
	if files != (tlsFiles{CertFile: tlsDir + "/tls.crt", KeyFile: tlsDir + "/tls.key"}) {
		t.Errorf("tls = %+v, want the Secret's tls.crt and tls.key under %s", files, tlsDir)
	}
	if mounted < 0 || !c.VolumeMounts[mounted].ReadOnly || c.VolumeMounts[mounted].SubPath != "" {
		t.Fatalf("mounts %+v: want the TLS Secret read-only at %s, whole", c.VolumeMounts, tlsDir)
	}
	i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == c.VolumeMounts[mounted].Name })
	if i < 0 || pod.Volumes[i].Secret == nil || pod.Volumes[i].Secret.SecretName != secret {
		t.Errorf("the volume at %s is not the Secret %s: %+v", tlsDir, secret, pod.Volumes)
	}
}

// checkScrapeAuth checks that the ServiceMonitor sends the metrics token
// as a bearer token from the pods' Secret (secret) under key, or sends
// none when key is "".
func checkScrapeAuth(t *testing.T, auth *safeAuthorization, secret, key string) {
	t.Helper()
	if key == "" {
		if auth != nil {
			t.Errorf("the ServiceMonitor sends %+v, but no metrics token is configured", auth)
		}
		return
	}
	if auth == nil || auth.Type != "Bearer" || auth.Credentials == nil ||
		auth.Credentials.Name != secret || auth.Credentials.Key != key {
		t.Errorf("the ServiceMonitor's authorization %+v: want a Bearer token from Secret %s, key %s", auth, secret, key)
	}
}

// TestChartRefuses checks that values the chart cannot honour stop the
// render with a message that says what to fix.
func TestChartRefuses(t *testing.T) {
	tests := []struct {
		name   string
		values string
		want   string
	}{
		{
			name:   "batch.data_dir off the volume",
			values: "config: {batch: {enabled: true, data_dir: /tmp/batch}}\n",
			want:   "config.batch.data_dir is the chart's",
		},
		{
			name: "a raw key in api_keys",
			values: `
config:
  tiers: [{name: free}]
  tenants: [{name: acme, tier: free, api_keys: [sk-live-123]}]
`,
			want: "config.tenants[0].api_keys[0] is not a SHA-256 digest",
		},
		{
			name:   "admin without a token",
			values: "admin: {enabled: true}\n",
			want:   "admin.token is required",
		},
		{
			name:   "a backend key named as no variable can be",
			values: "secrets: {backendApiKeys: {vllm-key: x}}\n",
			want:   `"vllm-key" is not an environment variable name`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := render(t, tt.values, kube)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("render error = %v, want one saying %q", err, tt.want)
			}
		})
	}
}

// render runs what `helm template --kube-version` does, with values (YAML)
// over the chart's defaults, and returns the manifests and NOTES.txt.
func render(t *testing.T, values, kubeVersion string) (manifest, notes string, err error) {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(&action.Configuration{Log: t.Logf})
	install.DryRun, install.ClientOnly, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = release, "llm"
	if install.KubeVersion, err = chartutil.ParseKubeVersion(kubeVersion); err != nil {
		t.Fatal(err)
	}
	rel, err := install.Run(chrt, vals)
	if err != nil {
		return "", "", err
	}
	if !strings.Contains(rel.Info.Notes, fullname+".llm.svc:8080") {
		t.Errorf("NOTES.txt does not give the Service's address:\n%s", rel.Info.Notes)
	}
	return rel.Manifest, rel.Info.Notes, nil
}

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// the chart writes (its Go types live in prometheus-operator, too big a
// dependency for this); decoding it strictly fails on any other field, so
// a new field needs adding here, checked against the CRD.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port          string             `json:"port"`
			Path          string             `json:"path"`
			Interval      string             `json:"interval"`
			ScrapeTimeout string             `json:"scrapeTimeout"`
			Authorization *safeAuthorization `json:"authorization"`
			Scheme        string             `json:"scheme"`
			TLSConfig     *safeTLSConfig     `json:"tlsConfig"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// safeTLSConfig is an endpoint's tlsConfig in the ServiceMonitor CRD (the
// fields the chart's test sets).
type safeTLSConfig struct {
	ServerName         string `json:"serverName"`
	InsecureSkipVerify bool   `json:"insecureSkipVerify"`
	CA                 *struct {
		Secret    *corev1.SecretKeySelector    `json:"secret"`
		ConfigMap *corev1.ConfigMapKeySelector `json:"configMap"`
	} `json:"ca"`
}

// safeAuthorization is an endpoint's authorization in the ServiceMonitor
// CRD: the credentials are a key of a Secret in its namespace.
type safeAuthorization struct {
	Type        string                    `json:"type"`
	Credentials *corev1.SecretKeySelector `json:"credentials"`
}

// decodeAll decodes every manifest strictly into its API type, as the API
// server would, keyed by "Kind/name".
func decodeAll(t *testing.T, manifest string) map[string]any {
	t.Helper()
	objs := map[string]any{}
	for _, doc := range releaseutil.SplitManifests(manifest) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 Deployment":
			obj = &appsv1.Deployment{}
		case "v1 Service":
			obj = &corev1.Service{}
		case "v1 ConfigMap":
			obj = &corev1.ConfigMap{}
		case "v1 Secret":
			obj = &corev1.Secret{}
		case "autoscaling/v2 HorizontalPodAutoscaler":
			obj = &autoscalingv2.HorizontalPodAutoscaler{}
		case "policy/v1 PodDisruptionBudget":
			obj = &policyv1.PodDisruptionBudget{}
		case "monitoring.coreos.com/v1 ServiceMonitor":
			obj = &serviceMonitor{}
		default:
			t.Fatalf("unexpected %s %s in\n%s", tm.APIVersion, tm.Kind, doc)
		}
		j, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v in\n%s", tm.Kind, err, doc)
		}
		// The API server's decoder: field names match case-sensitively,
		// and an unknown or repeated field is an error.
		strict, err := json.UnmarshalStrict(j, obj, json.DisallowDuplicateFields, json.DisallowUnknownFields)
		if err != nil || len(strict) > 0 {
			t.Fatalf("%s: %v %v in\n%s", tm.Kind, err, strict, doc)
		}
		meta := obj.(metav1.ObjectMetaAccessor).GetObjectMeta()
		key := tm.Kind + "/" + meta.GetName()
		if _, dup := objs[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		if meta.GetLabels()["app.kubernetes.io/instance"] != release {
			t.Errorf("%s lacks the chart's labels: %v", key, meta.GetLabels())
		}
		objs[key] = obj
	}
	return objs
}

// checkDeployment checks what every Deployment the chart renders promises:
// non-root, read-only, probes on /healthz and /readyz, the config mounted
// as a directory (so Sluice sees it change), bounded resources.
func checkDeployment(t *testing.T, dep *appsv1.Deployment) {
	t.Helper()
	pod := dep.Spec.Template
	checkSelects(t, "Deployment", mustSelector(t, dep.Spec.Selector), pod.Labels)
	psc := pod.Spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and user 65532", psc)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v: want a read-only root, no privilege escalation, all capabilities dropped", sc)
	}
	probes := []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}}
	for _, p := range probes {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.StrVal != "http" {
			t.Errorf("%s probe %+v: want GET %s on the http port", p.name, p.probe, p.path)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}
	if !slices.Contains(c.Args, "--config=/etc/sluice/sluice.yaml") {
		t.Errorf("args %v do not name /etc/sluice/sluice.yaml", c.Args)
	}
	if len(c.VolumeMounts) == 0 || c.VolumeMounts[0].MountPath != "/etc/sluice" || c.VolumeMounts[0].SubPath != "" || !c.VolumeMounts[0].ReadOnly {
		t.Errorf("volume mounts %+v: want the config directory at /etc/sluice, read-only, without subPath", c.VolumeMounts)
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g <= 30 {
		t.Errorf("terminationGracePeriodSeconds %v: want more than the 30s Sluice drains for", g)
	}
}

func mustSelector(t *testing.T, ls *metav1.LabelSelector) labels.Selector {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func checkSelects(t *testing.T, what string, s labels.Selector, l map[string]string) {
	t.Helper()
	if s.Empty() || !s.Matches(labels.Set(l)) {
		t.Errorf("%s selector %q does not select %v", what, s, l)
	}
}

// configText returns the sluice.yaml a ConfigMap or Secret holds.
func configText(t *testing.T, obj any) string {
	t.Helper()
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		return o.Data["sluice.yaml"]
	case *corev1.Secret:
		return string(o.Data["sluice.yaml"])
	}
	t.Fatalf("no config in %T", obj)
	return ""
}

// validate runs `sluice validate` on config, with env as the pods would
// have it (a backend's api_key_env must be set).
func validate(t *testing.T, config string, env map[string]string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sluiceBin, "validate", "--config", path)
	cmd.Env = []string{}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("sluice validate: %v\n%s\nconfig:\n%s", err, out, config)
	}
}
