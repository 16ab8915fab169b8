{{/* Chart name, cut to 63 characters (a DNS label). */}}
{{- define "jobwire.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release-chart unless the release name already contains the chart's name. */}}
{{- define "jobwire.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "jobwire.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "jobwire.commonLabels" -}}
helm.sh/chart: {{ include "jobwire.chart" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "jobwire.labels" -}}
{{ include "jobwire.commonLabels" . }}
{{ include "jobwire.selectorLabels" . }}
{{- end }}

{{- define "jobwire.selectorLabels" -}}
app.kubernetes.io/name: {{ include "jobwire.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end }}

{{/* The in-chart Redis. */}}
{{- define "jobwire.redis.fullname" -}}
{{- printf "%s-redis" (include "jobwire.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "jobwire.redis.labels" -}}
{{ include "jobwire.commonLabels" . }}
{{ include "jobwire.redis.selectorLabels" . }}
{{- end }}

{{- define "jobwire.redis.selectorLabels" -}}
app.kubernetes.io/name: {{ include "jobwire.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: redis
{{- end }}

{{- define "jobwire.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "jobwire.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Name and key of the Secret holding the Redis URL. */}}
{{- define "jobwire.redisSecretName" -}}
{{- if .Values.redis.existingSecret.name }}
{{- .Values.redis.existingSecret.name }}
{{- else }}
{{- include "jobwire.fullname" . }}
{{- end }}
{{- end }}

{{- define "jobwire.redisSecretKey" -}}
{{- if .Values.redis.existingSecret.name }}
{{- .Values.redis.existingSecret.key }}
{{- else }}
{{- "redis-url" }}
{{- end }}
{{- end }}

{{/*
Password of the in-chart Redis: the value if given, else the one already stored in the release's
Secret (so upgrades keep it), else a new random one. Alphanumeric, so it needs no escaping in the
URL.
*/}}
{{- define "jobwire.redis.password" -}}
{{- if .Values.redis.inChart.password }}
{{- .Values.redis.inChart.password }}
{{- else }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "jobwire.fullname" .) }}
{{- if and $existing $existing.data (index $existing.data "redis-password") }}
{{- index $existing.data "redis-password" | b64dec }}
{{- else }}
{{- randAlphaNum 32 }}
{{- end }}
{{- end }}
{{- end }}

{{/*
terminationGracePeriodSeconds: the explicit value, or shutdownGraceSeconds + 15. Kubernetes sends
SIGKILL when it runs out; jobwire needs its shutdown grace plus up to about 10 s to hand the
remaining leases back and close connections, so less than grace + 10 is refused.
*/}}
{{- define "jobwire.terminationGracePeriodSeconds" -}}
{{- $grace := int .Values.config.shutdownGraceSeconds }}
{{- $tgps := .Values.terminationGracePeriodSeconds }}
{{- if kindIs "invalid" $tgps }}
{{- add $grace 15 }}
{{- else if lt (int $tgps) (add $grace 10) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be at least config.shutdownGraceSeconds + 10 (%d): Kubernetes would kill jobwire before it hands the leases it still holds back" (int $tgps) (add $grace 10)) }}
{{- else }}
{{- int $tgps }}
{{- end }}
{{- end }}

{{/*
JOBWIRE_REDIS_URL built from redis.external: scheme by mode and TLS, the user and
$(REDIS_PASSWORD) as userinfo (the kubelet expands it from the REDIS_PASSWORD variable, which
the Deployment defines first from redis.external.passwordSecret), the hosts comma-separated, and
/<master name> for Sentinel. Examples:
  redis+cluster://:$(REDIS_PASSWORD)@n1:6379,n2:6379,n3:6379
  redis+sentinel://:$(REDIS_PASSWORD)@s1:26379,s2:26379/mymaster
*/}}
{{- define "jobwire.redis.externalUrl" -}}
{{- $e := .Values.redis.external }}
{{- $scheme := ternary "rediss" "redis" (and $e.tls (ne $e.mode "sentinel")) }}
{{- if eq $e.mode "cluster" }}
{{- $scheme = printf "%s+cluster" $scheme }}
{{- else if eq $e.mode "sentinel" }}
{{- $scheme = printf "%s+sentinel" $scheme }}
{{- end }}
{{- $auth := "" }}
{{- if $e.passwordSecret.name }}
{{- $auth = printf "%s:$(REDIS_PASSWORD)@" $e.username }}
{{- else if $e.username }}
{{- $auth = printf "%s@" $e.username }}
{{- end }}
{{- $path := "" }}
{{- if eq $e.mode "sentinel" }}
{{- $path = printf "/%s" $e.sentinel.masterName }}
{{- end }}
{{- printf "%s://%s%s%s" $scheme $auth (join "," $e.hosts) $path }}
{{- end }}

{{/*
Ports jobwire reaches an external Redis on, as a JSON list: those of redis.external.hosts (the
sentinels' for Sentinel) and networkPolicy.redisEgress.port (the Redis servers' own: the
master a sentinel names, the nodes a Cluster redirects to).
*/}}
{{- define "jobwire.redis.egressPorts" -}}
{{- $ports := list (int .Values.networkPolicy.redisEgress.port) }}
{{- range .Values.redis.external.hosts }}
{{- $ports = append $ports (regexFind "[0-9]+$" . | int) }}
{{- end }}
{{- $ports | uniq | toJson }}
{{- end }}

{{/*
Security choices that cannot both hold, or that would leave jobwire unable to start, fail the
render with a message naming the values (values.schema.json checks the shapes).
*/}}
{{- define "jobwire.security.check" -}}
{{- $auth := include "jobwire.auth.enabled" . }}
{{- if and .Values.auth.existingSecret.name .Values.auth.config }}
{{- fail "auth.existingSecret.name and auth.config both set: give the auth file one way (a Secret you manage, or inline)" }}
{{- end }}
{{- if and (not $auth) (not .Values.insecure) }}
{{- fail "jobwire has no authentication configured: set auth.existingSecret.name (a Secret with the auth file) or auth.config (the auth file inline), or set insecure=true to let every client that reaches the gRPC port use every queue. jobwire refuses to listen on a non-loopback address without --auth-file unless --insecure is given (see helm/jobwire/README.md, Security)" }}
{{- end }}
{{- if and $auth .Values.insecure }}
{{- fail "insecure=true and an auth file (auth.existingSecret.name or auth.config) both set: with an auth file jobwire authenticates every call; remove insecure" }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) }}
{{- fail "tls.enabled needs tls.secretName: the Secret with tls.crt and tls.key (or the one tls.certManager writes)" }}
{{- end }}
{{- if and (not .Values.tls.enabled) (or .Values.tls.clientAuth .Values.tls.certManager.enabled) }}
{{- fail "tls.clientAuth and tls.certManager.enabled need tls.enabled=true" }}
{{- end }}
{{- if and .Values.tls.certManager.enabled (not .Values.tls.certManager.issuerRef.name) }}
{{- fail "tls.certManager.enabled needs tls.certManager.issuerRef.name (an Issuer or ClusterIssuer of cert-manager)" }}
{{- end }}
{{- if and .Values.tls.enabled (eq .Values.livenessProbe.type "grpc") }}
{{- fail "livenessProbe.type=grpc cannot be used with tls.enabled: the kubelet's gRPC probe speaks only plaintext; use livenessProbe.type=http (/healthz)" }}
{{- end }}
{{- end }}

{{/* "true" when an auth file is configured, else "". */}}
{{- define "jobwire.auth.enabled" -}}
{{- if or .Values.auth.existingSecret.name .Values.auth.config }}true{{ end }}
{{- end }}

{{/* Name and key of the Secret holding the auth file. */}}
{{- define "jobwire.auth.secretName" -}}
{{- default (printf "%s-auth" (include "jobwire.fullname" .)) .Values.auth.existingSecret.name }}
{{- end }}

{{- define "jobwire.auth.secretKey" -}}
{{- if .Values.auth.existingSecret.name }}
{{- .Values.auth.existingSecret.key }}
{{- else }}
{{- "auth.yaml" }}
{{- end }}
{{- end }}

{{/* Name and key of the Secret holding the /metrics bearer token. */}}
{{- define "jobwire.metricsAuth.secretName" -}}
{{- default (printf "%s-metrics" (include "jobwire.fullname" .)) .Values.metricsAuth.existingSecret.name }}
{{- end }}

{{- define "jobwire.metricsAuth.secretKey" -}}
{{- if .Values.metricsAuth.existingSecret.name }}
{{- .Values.metricsAuth.existingSecret.key }}
{{- else }}
{{- "token" }}
{{- end }}
{{- end }}

{{/*
The /metrics token the chart makes: the one already stored in the release's metrics Secret (so
upgrades and the ServiceMonitor keep it), else a new random one.
*/}}
{{- define "jobwire.metricsAuth.token" -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "jobwire.metricsAuth.secretName" .) }}
{{- if and $existing $existing.data (index $existing.data "token") }}
{{- index $existing.data "token" | b64dec }}
{{- else }}
{{- randAlphaNum 48 }}
{{- end }}
{{- end }}

{{/* Where the client CA bundle is mounted (its own Secret, or the TLS Secret). */}}
{{- define "jobwire.tls.clientCaPath" -}}
{{- if .Values.tls.clientCa.secretName }}
{{- printf "/etc/jobwire-client-ca/%s" .Values.tls.clientCa.key }}
{{- else }}
{{- printf "/etc/jobwire-tls/%s" .Values.tls.clientCa.key }}
{{- end }}
{{- end }}

{{/*
The JOBWIRE_* variables of the `limits` values that are set (null: jobwire's default), one env
entry each, in the order of the keys' names. An unknown key fails the render (the schema
refuses it first).
*/}}
{{- define "jobwire.limits.env" -}}
{{- $names := dict
  "maxConcurrentStreams" "JOBWIRE_MAX_CONCURRENT_STREAMS"
  "maxStreamsPerConnection" "JOBWIRE_MAX_STREAMS_PER_CONNECTION"
  "maxStreamsPerPrincipal" "JOBWIRE_MAX_STREAMS_PER_PRINCIPAL"
  "http2MaxPendingResetStreams" "JOBWIRE_HTTP2_MAX_PENDING_RESET_STREAMS"
  "http2MaxLocalErrorResetStreams" "JOBWIRE_HTTP2_MAX_LOCAL_ERROR_RESET_STREAMS"
  "maxConnectionAge" "JOBWIRE_MAX_CONNECTION_AGE"
  "maxConnectionAgeGrace" "JOBWIRE_MAX_CONNECTION_AGE_GRACE"
  "maxBufferedRequestBytesPerConnection" "JOBWIRE_MAX_BUFFERED_REQUEST_BYTES_PER_CONNECTION"
  "maxBufferedRequestBytes" "JOBWIRE_MAX_BUFFERED_REQUEST_BYTES"
  "grpcPrefaceTimeout" "JOBWIRE_GRPC_PREFACE_TIMEOUT"
  "grpcKeepaliveInterval" "JOBWIRE_GRPC_KEEPALIVE_INTERVAL"
  "grpcKeepaliveTimeout" "JOBWIRE_GRPC_KEEPALIVE_TIMEOUT"
  "maxConnections" "JOBWIRE_MAX_CONNECTIONS"
  "maxConnectionsPerIp" "JOBWIRE_MAX_CONNECTIONS_PER_IP"
  "fdReserve" "JOBWIRE_FD_RESERVE"
  "httpMaxConnections" "JOBWIRE_HTTP_MAX_CONNECTIONS"
  "httpHeaderReadTimeout" "JOBWIRE_HTTP_HEADER_READ_TIMEOUT"
  "httpRequestTimeout" "JOBWIRE_HTTP_REQUEST_TIMEOUT"
  "httpMaxBodyBytes" "JOBWIRE_HTTP_MAX_BODY_BYTES"
}}
{{- range $key, $value := .Values.limits }}
{{- if not (kindIs "invalid" $value) }}
{{- $name := get $names $key }}
{{- if not $name }}
{{- fail (printf "limits.%s is not a limit the chart knows" $key) }}
{{- end }}
- name: {{ $name }}
  value: {{ if kindIs "string" $value }}{{ $value | quote }}{{ else }}{{ $value | int64 | quote }}{{ end }}
{{- end }}
{{- end }}
{{- end }}
