{{/* The chart's name, or nameOverride. */}}
{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The objects' name: fullnameOverride, else release-chart (the release alone when it already holds the chart's name). */}}
{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The Secret the pods take their environment from. */}}
{{- define "sluice.secretName" -}}
{{- default (include "sluice.fullname" .) .Values.secrets.existingSecret -}}
{{- end -}}

{{/* The chart-made Secret's data (empty when there is none to make). */}}
{{- define "sluice.secretData" -}}
{{- if not .Values.secrets.existingSecret -}}
{{- if .Values.admin.enabled }}
SLUICE_ADMIN_TOKEN: {{ required "admin.token is required when admin.enabled (or name a secrets.existingSecret holding SLUICE_ADMIN_TOKEN)" .Values.admin.token | b64enc | quote }}
{{- end }}
{{- with .Values.secrets.redisUrl }}
SLUICE_REDIS_URL: {{ . | b64enc | quote }}
{{- end }}
{{- with .Values.secrets.metricsToken }}
{{ include "sluice.metricsTokenEnv" $ }}: {{ . | toString | b64enc | quote }}
{{- end }}
{{- range $name, $key := .Values.secrets.backendApiKeys }}
{{- if not (regexMatch "^[A-Za-z_][A-Za-z0-9_]*$" $name) }}
{{- fail (printf "secrets.backendApiKeys: %q is not an environment variable name" $name) }}
{{- end }}
{{ $name }}: {{ $key | toString | b64enc | quote }}
{{- end }}
{{- end -}}
{{- end -}}

{{/* The variable Sluice reads the metrics token from: config.metrics_token_env, as Sluice defaults it. */}}
{{- define "sluice.metricsTokenEnv" -}}
{{- dig "metrics_token_env" "" (.Values.config | default dict) | default "SLUICE_METRICS_TOKEN" -}}
{{- end -}}

{{/* The pods' Secret's key holding the metrics token, or "" when none is configured. */}}
{{- define "sluice.metricsTokenKey" -}}
{{- if .Values.secrets.existingSecret -}}
{{- if .Values.secrets.metricsTokenInExistingSecret -}}
{{- include "sluice.metricsTokenEnv" . -}}
{{- end -}}
{{- else if .Values.secrets.metricsToken -}}
{{- include "sluice.metricsTokenEnv" . -}}
{{- end -}}
{{- end -}}

{{/* The most pods there can be: autoscaling.maxReplicas with autoscaling, else replicaCount. */}}
{{- define "sluice.maxPods" -}}
{{- if .Values.autoscaling.enabled -}}
{{- .Values.autoscaling.maxReplicas | int -}}
{{- else -}}
{{- .Values.replicaCount | int -}}
{{- end -}}
{{- end -}}

{{/* Where the batchData volume is mounted and batch.data_dir points when the Batch API is on. */}}
{{- define "sluice.batchDir" -}}
/var/lib/sluice
{{- end -}}

{{/*
The Sluice config file: .Values.config with listen, admin, batch.data_dir
and each model's admission.replicas set by the chart (values.yaml says how). Tenants' api_keys
must be SHA-256 digests.
*/}}
{{- define "sluice.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- $_ := set $cfg "listen" (printf "0.0.0.0:%d" (int .Values.ports.http)) -}}
{{- $tls := dict -}}
{{- if .Values.tls.secretName -}}
{{- $tls = dict "cert_file" "/etc/sluice-tls/tls.crt" "key_file" "/etc/sluice-tls/tls.key" -}}
{{- $_ := set $cfg "tls" $tls -}}
{{- end -}}
{{- if .Values.admin.enabled -}}
{{- $admin := dict "listen" (printf "0.0.0.0:%d" (int .Values.ports.admin)) "token_env" "SLUICE_ADMIN_TOKEN" -}}
{{- if $tls -}}
{{- $_ := set $admin "tls" $tls -}}
{{- end -}}
{{- $_ := set $cfg "admin" $admin -}}
{{- else -}}
{{- $_ := unset $cfg "admin" -}}
{{- end -}}
{{- if dig "batch" "enabled" false $cfg -}}
{{- $dir := include "sluice.batchDir" . -}}
{{- $given := dig "batch" "data_dir" "" $cfg -}}
{{- if and $given (ne (clean $given) $dir) -}}
{{- fail (printf "config.batch.data_dir is the chart's: the batchData volume is mounted at %s (the root file system is read-only); leave data_dir out" $dir) -}}
{{- end -}}
{{- $_ := set $cfg.batch "data_dir" $dir -}}
{{- end -}}
{{- $replicas := include "sluice.maxPods" . -}}
{{- range $m := $cfg.models -}}
{{- $adm := $m.admission | default dict -}}
{{- if not (hasKey $adm "replicas") -}}
{{- $_ := set $adm "replicas" (int $replicas) -}}
{{- end -}}
{{- $_ := set $m "admission" $adm -}}
{{- end -}}
{{- range $i, $t := $cfg.tenants -}}
{{- range $j, $k := $t.api_keys -}}
{{- if not (regexMatch "^(sha256:)?[0-9a-f]{64}$" (toString $k)) -}}
{{- fail (printf "config.tenants[%d].api_keys[%d] is not a SHA-256 digest: write `sluice hash-key KEY`'s output (sha256:<64 hex digits>), never the key" $i $j) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}
