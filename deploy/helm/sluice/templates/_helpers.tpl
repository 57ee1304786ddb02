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
{{- range $name, $key := .Values.secrets.backendApiKeys }}
{{- if not (regexMatch "^[A-Za-z_][A-Za-z0-9_]*$" $name) }}
{{- fail (printf "secrets.backendApiKeys: %q is not an environment variable name" $name) }}
{{- end }}
{{ $name }}: {{ $key | toString | b64enc | quote }}
{{- end }}
{{- end -}}
{{- end -}}

{{/*
The Sluice config file: .Values.config with listen, admin and each model's
admission.replicas set by the chart (values.yaml says how). Tenants' api_keys
must be SHA-256 digests.
*/}}
{{- define "sluice.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- $_ := set $cfg "listen" (printf "0.0.0.0:%d" (int .Values.ports.http)) -}}
{{- if .Values.admin.enabled -}}
{{- $_ := set $cfg "admin" (dict "listen" (printf "0.0.0.0:%d" (int .Values.ports.admin)) "token_env" "SLUICE_ADMIN_TOKEN") -}}
{{- else -}}
{{- $_ := unset $cfg "admin" -}}
{{- end -}}
{{- $replicas := .Values.replicaCount -}}
{{- if .Values.autoscaling.enabled -}}
{{- $replicas = .Values.autoscaling.maxReplicas -}}
{{- end -}}
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
