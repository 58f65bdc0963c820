{{/* Names ---------------------------------------------------------------------------------- */}}

{{- define "relaunch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "relaunch.fullname" -}}
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

{{/* Object name of one component: (dict "ctx" $ "component" "detector") */}}
{{- define "relaunch.componentName" -}}
{{- printf "%s-%s" (include "relaunch.fullname" .ctx | trunc 50 | trimSuffix "-") .component }}
{{- end }}

{{- define "relaunch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "relaunch.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Labels --------------------------------------------------------------------------------- */}}

{{- define "relaunch.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "relaunch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: relaunch
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* (dict "ctx" $ "component" "detector") */}}
{{- define "relaunch.componentLabels" -}}
{{ include "relaunch.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "relaunch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "relaunch.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Image ---------------------------------------------------------------------------------- */}}

{{- define "relaunch.image" -}}
image: {{ printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- end }}

{{/* Connections ------------------------------------------------------------------------------ */}}

{{/* The Service name the NATS chart gives its server (its nats.fullname, from our values). */}}
{{- define "relaunch.natsServiceName" -}}
{{- if .Values.nats.fullnameOverride }}
{{- .Values.nats.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default "nats" .Values.nats.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Secret the chart writes the URLs given as values into. */}}
{{- define "relaunch.urlSecretName" -}}
{{- printf "%s-urls" (include "relaunch.fullname" .) }}
{{- end }}

{{/* One EnvVar for a URL: (dict "ctx" $ "env" "RELAUNCH_REDIS_URL" "conf" .Values.redis "key" "redis-url" "what" "redis") */}}
{{- define "relaunch.urlEnv" -}}
- name: {{ .env }}
  valueFrom:
    secretKeyRef:
{{- if .conf.existingSecret.name }}
      name: {{ .conf.existingSecret.name }}
      key: {{ .conf.existingSecret.key }}
{{- else if .conf.url }}
      name: {{ include "relaunch.urlSecretName" .ctx }}
      key: {{ .key }}
{{- else }}
{{- fail (printf "set %s.url or %s.existingSecret.name" .what .what) }}
{{- end }}
{{- end }}

{{/* Replicas of relaunch's streams and buckets: the NATS chart's cluster size when it runs a cluster,
else externalNats.replicas (1 by default). */}}
{{- define "relaunch.natsReplicas" -}}
{{- if .Values.nats.enabled }}
{{- $cluster := (.Values.nats.config | default dict).cluster | default dict }}
{{- if $cluster.enabled }}{{ $cluster.replicas | default 3 }}{{ else }}1{{ end }}
{{- else }}
{{- .Values.externalNats.replicas | default 1 }}
{{- end }}
{{- end }}

{{- define "relaunch.natsEnv" -}}
{{- if .Values.nats.enabled }}
- name: RELAUNCH_NATS_URL
  value: {{ printf "nats://%s.%s.svc:4222" (include "relaunch.natsServiceName" .) .Release.Namespace | quote }}
{{- else }}
{{ include "relaunch.urlEnv" (dict "ctx" . "env" "RELAUNCH_NATS_URL" "conf" .Values.externalNats "key" "nats-url" "what" "externalNats") | trim }}
{{- end }}
- name: RELAUNCH_NATS_REPLICAS
  value: {{ include "relaunch.natsReplicas" . | trim | quote }}
{{- end }}

{{/* Environment every service gets: cluster, log level, NATS. */}}
{{- define "relaunch.commonEnv" -}}
- name: RELAUNCH_CLUSTER
  value: {{ .Values.cluster | quote }}
- name: RELAUNCH_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: PYTHONUNBUFFERED
  value: "1"
- name: RELAUNCH_HEALTH_HOST
  value: "0.0.0.0"
{{ include "relaunch.natsEnv" . | trim }}
{{- end }}

{{/* A service's own settings map as RELAUNCH_<PREFIX>_<NAME>: (dict "prefix" "DETECTOR" "settings" .Values.detector.settings) */}}
{{- define "relaunch.settingsEnv" -}}
{{- range $name, $value := .settings }}
- name: {{ printf "RELAUNCH_%s_%s" $.prefix ($name | upper) }}
  value: {{ if or (kindIs "slice" $value) (kindIs "map" $value) }}{{ toJson $value | quote }}{{ else }}{{ $value | toString | quote }}{{ end }}
{{- end }}
{{- end }}

{{/* Pods and containers ------------------------------------------------------------------------ */}}

{{/* Pod-level fields every relaunch pod shares: (dict "ctx" $ "values" .Values.detector "securityContext" ...) */}}
{{- define "relaunch.podCommon" -}}
serviceAccountName: {{ include "relaunch.serviceAccountName" .ctx }}
automountServiceAccountToken: false
# Off on purpose: Kubernetes would otherwise inject RELAUNCH_API_PORT=tcp://... and
# RELAUNCH_<SERVICE>_SERVICE_HOST for this release's Services, which collide with the services'
# settings (they refuse unknown RELAUNCH_<SERVICE>_* keys).
enableServiceLinks: false
securityContext:
  {{- toYaml (.securityContext | default .ctx.Values.podSecurityContext) | nindent 2 }}
{{- with .ctx.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "relaunch.podAnnotations" -}}
{{- with .Values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "relaunch.containerSecurityContext" -}}
securityContext:
  {{- toYaml .Values.containerSecurityContext | nindent 2 }}
{{- end }}

{{/* /healthz and /metrics of a service: it listens on the pod's address (RELAUNCH_HEALTH_HOST=0.0.0.0,
set in commonEnv) on a port named "metrics", which the probes and the PodMonitor use. /healthz answers
503 while a dependency is down, so an unhealthy service fails the probe. */}}
{{- define "relaunch.healthProbes" -}}
ports:
  - name: metrics
    containerPort: {{ int .port }}
    protocol: TCP
readinessProbe:
  httpGet:
    path: /healthz
    port: metrics
  {{- toYaml .ctx.Values.probes.readiness | nindent 2 }}
livenessProbe:
  httpGet:
    path: /healthz
    port: metrics
  {{- toYaml .ctx.Values.probes.liveness | nindent 2 }}
{{- end }}

{{- define "relaunch.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- end }}

{{- define "relaunch.tmpMount" -}}
- name: tmp
  mountPath: /tmp
{{- end }}

{{/* Slurm access (actuator and watchdog) ----------------------------------------------------- */}}

{{- define "relaunch.slurmConfigMapName" -}}
{{- if .Values.actuator.slurm.conf }}
{{- printf "%s-slurm" (include "relaunch.fullname" .) }}
{{- else if .Values.actuator.slurm.existingConfigMap }}
{{- .Values.actuator.slurm.existingConfigMap }}
{{- else }}
{{- fail "the actuator needs the cluster's slurm.conf: set actuator.slurm.conf or actuator.slurm.existingConfigMap" }}
{{- end }}
{{- end }}

{{- define "relaunch.slurmRest" -}}
{{- eq .Values.actuator.slurm.api "rest" | ternary "true" "" }}
{{- end }}

{{- define "relaunch.slurmEnv" -}}
{{- $s := .Values.actuator.slurm }}
{{- if include "relaunch.slurmRest" . }}
- name: RELAUNCH_SLURM_API
  value: rest
- name: RELAUNCH_SLURMRESTD_URL
  value: {{ required "actuator.slurm.rest.url: slurmrestd's URL (Slinky: http://slurm-restapi.slurm:6820)" $s.rest.url | quote }}
- name: RELAUNCH_SLURMRESTD_TOKEN_FILE
  value: {{ printf "/var/run/secrets/relaunch/slurmrestd/%s" $s.rest.tokenSecretKey | quote }}
- name: RELAUNCH_SLURMRESTD_TLS_VERIFY
  value: {{ $s.rest.tlsVerify | quote }}
- name: RELAUNCH_SLURMRESTD_TIMEOUT_S
  value: {{ $s.rest.timeoutSeconds | quote }}
{{- with $s.rest.userName }}
- name: RELAUNCH_SLURMRESTD_USER_NAME
  value: {{ . | quote }}
{{- end }}
{{- if $s.rest.caSecret }}
- name: RELAUNCH_SLURMRESTD_CA_FILE
  value: /var/run/secrets/relaunch/slurmrestd-ca/ca.crt
{{- end }}
{{- else }}
- name: SLURM_CONF
  value: {{ printf "%s/slurm.conf" (trimSuffix "/" $s.mountPath) | quote }}
{{- end }}
{{- end }}

{{- define "relaunch.mungeOn" -}}
{{- and (not (include "relaunch.slurmRest" .)) .Values.actuator.slurm.munge.enabled | ternary "true" "" }}
{{- end }}

{{- define "relaunch.slurmVolumes" -}}
{{- if include "relaunch.slurmRest" . }}
- name: slurmrestd-token
  secret:
    secretName: {{ required "actuator.slurm.rest.tokenSecret: name the Secret holding relaunch's slurmrestd token" .Values.actuator.slurm.rest.tokenSecret }}
    defaultMode: 0440
    items:
      - key: {{ .Values.actuator.slurm.rest.tokenSecretKey }}
        path: {{ .Values.actuator.slurm.rest.tokenSecretKey }}
{{- with .Values.actuator.slurm.rest.caSecret }}
- name: slurmrestd-ca
  secret:
    secretName: {{ . }}
    items:
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- else }}
- name: slurm-conf
  configMap:
    name: {{ include "relaunch.slurmConfigMapName" . }}
{{- end }}
{{- if include "relaunch.mungeOn" . }}
- name: munge-socket
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
- name: munge-key-secret
  secret:
    secretName: {{ required "actuator.slurm.munge.keySecret: name the Secret holding the cluster's munge key (or disable actuator.slurm.munge)" .Values.actuator.slurm.munge.keySecret }}
    defaultMode: 0440
    items:
      - key: {{ .Values.actuator.slurm.munge.keySecretKey }}
        path: munge.key
- name: munge-key
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
{{- end }}
{{- end }}

{{- define "relaunch.slurmMounts" -}}
{{- if include "relaunch.slurmRest" . }}
- name: slurmrestd-token
  mountPath: /var/run/secrets/relaunch/slurmrestd
  readOnly: true
{{- if .Values.actuator.slurm.rest.caSecret }}
- name: slurmrestd-ca
  mountPath: /var/run/secrets/relaunch/slurmrestd-ca
  readOnly: true
{{- end }}
{{- else }}
- name: slurm-conf
  mountPath: {{ .Values.actuator.slurm.mountPath }}
  readOnly: true
{{- end }}
{{- if include "relaunch.mungeOn" . }}
- name: munge-socket
  mountPath: /run/munge
{{- end }}
{{- end }}

{{/* munged as a native sidecar. munged insists that its key is a regular file owned by its own
uid and unreadable by others, which a Secret volume (a symlink, root-owned) is not: the first init
container copies it. Its directories are emptyDirs (world-writable, no sticky bit), which munged
also calls insecure: --force turns those refusals into warnings. */}}
{{- define "relaunch.mungeInitContainers" -}}
{{- if include "relaunch.mungeOn" . }}
- name: munge-key
  {{- include "relaunch.image" . | nindent 2 }}
  command: ["sh", "-c", "install -m 0400 /run/munge-key-secret/munge.key /run/munge-key/munge.key"]
  {{- include "relaunch.containerSecurityContext" . | nindent 2 }}
  resources:
    {{- toYaml .Values.actuator.slurm.munge.resources | nindent 4 }}
  volumeMounts:
    - name: munge-key-secret
      mountPath: /run/munge-key-secret
      readOnly: true
    - name: munge-key
      mountPath: /run/munge-key
- name: munged
  {{- include "relaunch.image" . | nindent 2 }}
  restartPolicy: Always
  command:
    - munged
    - --foreground
    - --force
    - --key-file=/run/munge-key/munge.key
    - --socket=/run/munge/munge.socket.2
    - --pid-file=/run/munge/munged.pid
    - --seed-file=/run/munge/munged.seed
  {{- include "relaunch.containerSecurityContext" . | nindent 2 }}
  resources:
    {{- toYaml .Values.actuator.slurm.munge.resources | nindent 4 }}
  startupProbe:
    exec:
      command: ["sh", "-c", "munge -n -S /run/munge/munge.socket.2 >/dev/null"]
    periodSeconds: 1
    failureThreshold: 30
  volumeMounts:
    - name: munge-key
      mountPath: /run/munge-key
      readOnly: true
    - name: munge-socket
      mountPath: /run/munge
{{- end }}
{{- end }}

{{/* NATS credentials and TLS (docs/security.md): (dict "ctx" $ "user" "detector"). The password is a
file from the natsAuth Secret, holding only this user's key; never an environment value. */}}
{{- define "relaunch.natsAuthEnv" -}}
{{- if .ctx.Values.natsAuth.existingSecret }}
- name: RELAUNCH_NATS_USER
  value: {{ .user | quote }}
- name: RELAUNCH_NATS_PASSWORD_FILE
  value: /var/run/secrets/relaunch/nats/password
{{- end }}
{{- if .ctx.Values.natsTls.existingSecret }}
- name: RELAUNCH_NATS_TLS_CA
  value: /var/run/secrets/relaunch/nats-tls/ca.crt
{{- if .ctx.Values.natsTls.clientCert }}
- name: RELAUNCH_NATS_TLS_CERT
  value: /var/run/secrets/relaunch/nats-tls/tls.crt
- name: RELAUNCH_NATS_TLS_KEY
  value: /var/run/secrets/relaunch/nats-tls/tls.key
{{- end }}
{{- end }}
{{- end }}

{{- define "relaunch.natsAuthMounts" -}}
{{- if .ctx.Values.natsAuth.existingSecret }}
- name: nats-credentials
  mountPath: /var/run/secrets/relaunch/nats
  readOnly: true
{{- end }}
{{- if .ctx.Values.natsTls.existingSecret }}
- name: nats-tls
  mountPath: /var/run/secrets/relaunch/nats-tls
  readOnly: true
{{- end }}
{{- end }}

{{- define "relaunch.natsAuthVolumes" -}}
{{- if .ctx.Values.natsAuth.existingSecret }}
- name: nats-credentials
  secret:
    secretName: {{ .ctx.Values.natsAuth.existingSecret }}
    defaultMode: 0400
    items:
      - key: {{ printf "%s.pass" .user }}
        path: password
{{- end }}
{{- if .ctx.Values.natsTls.existingSecret }}
- name: nats-tls
  secret:
    secretName: {{ .ctx.Values.natsTls.existingSecret }}
    defaultMode: 0400
    items:
      - key: ca.crt
        path: ca.crt
      {{- if .ctx.Values.natsTls.clientCert }}
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
      {{- end }}
{{- end }}
{{- end }}
