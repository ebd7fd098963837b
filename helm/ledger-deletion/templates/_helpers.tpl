{{/* Names and labels, as apache/pulsar-helm-chart spells them. */}}

{{- define "ledger-deletion.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ledger-deletion.fullname" -}}
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

{{- define "ledger-deletion.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Every object: the Pulsar chart's standard labels plus the recommended app.kubernetes.io ones. */}}
{{- define "ledger-deletion.standardLabels" -}}
app: {{ template "ledger-deletion.name" . }}
chart: {{ template "ledger-deletion.chart" . }}
release: {{ .Release.Name }}
heritage: {{ .Release.Service }}
cluster: {{ .Values.clusterName }}
app.kubernetes.io/name: {{ template "ledger-deletion.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selectors: stable across upgrades (no chart version, no app version). */}}
{{- define "ledger-deletion.matchLabels" -}}
app: {{ template "ledger-deletion.name" . }}
release: {{ .Release.Name }}
{{- end -}}

{{- define "ledger-deletion.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ledger-deletion.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "ledger-deletion.image" -}}
{{- $image := index .root.Values.images .which -}}
{{- $tag := $image.tag | default (ternary .root.Chart.AppVersion (printf "%s-spark" .root.Chart.AppVersion) (eq .which "daemon")) -}}
{{- printf "%s:%s" $image.repository $tag -}}
{{- end -}}

{{/* Where each referenced Secret is mounted: its *File config key points there. */}}
{{- define "ledger-deletion.secretDir" -}}/etc/ledger-deletion/secrets{{- end -}}

{{/* The daemon's --data-dir: its audit trail (audit/audit-<n>.jsonl), its cursor and dedup state. */}}
{{- define "ledger-deletion.dataDir" -}}/var/lib/ledger-deletion/data{{- end -}}

{{/* The CLI's common options: which cluster, which config file, where local state lives. */}}
{{- define "ledger-deletion.commonArgs" -}}
- --metadata-store
- {{ required "pulsar.metadataStore is required" .Values.pulsar.metadataStore | quote }}
{{- with .Values.pulsar.bookkeeperMetadataStore }}
- --bookkeeper-metadata-store
- {{ . | quote }}
{{- end }}
- --broker-url
- {{ required "pulsar.brokerUrl is required" .Values.pulsar.brokerUrl | quote }}
{{- with .Values.pulsar.webServiceUrl }}
- --web-service-url
- {{ . | quote }}
{{- end }}
- --config
- /etc/ledger-deletion/ledger-deletion.toml
- --data-dir
- {{ include "ledger-deletion.dataDir" . }}
{{- end -}}

{{/*
Volumes every pod mounts: the config file, the data dir, scratch space, the referenced Secrets.
Argument: (dict "root" $ "dataClaim" bool). With dataClaim the data dir is not a volume here: the
StatefulSet's volumeClaimTemplate of the same name supplies it; otherwise it is an emptyDir, lost
with the pod (the scan's scratch, or the daemon with daemon.persistence.enabled=false).
*/}}
{{- define "ledger-deletion.volumes" -}}
{{- $root := .root -}}
- name: config
  configMap:
    name: {{ template "ledger-deletion.fullname" $root }}
{{- if not .dataClaim }}
- name: data
  emptyDir: {}
{{- end }}
- name: tmp
  emptyDir: {}
{{- range $name, $secret := (include "ledger-deletion.fileSecrets" $root | fromYaml) }}
- name: {{ $name }}
  secret:
    secretName: {{ $secret.secretName }}
    items:
      - key: {{ $secret.key }}
        path: {{ $secret.key }}
{{- end }}
{{- end -}}

{{- define "ledger-deletion.volumeMounts" -}}
- name: config
  mountPath: /etc/ledger-deletion/ledger-deletion.toml
  subPath: ledger-deletion.toml
  readOnly: true
- name: data
  mountPath: {{ include "ledger-deletion.dataDir" . }}
- name: tmp
  mountPath: /tmp
{{- range $name, $secret := (include "ledger-deletion.fileSecrets" . | fromYaml) }}
- name: {{ $name }}
  mountPath: {{ include "ledger-deletion.secretDir" $ }}/{{ $name }}
  readOnly: true
{{- end }}
{{- end -}}

{{/*
The daemon's pod template, one for both workloads: the Deployment (daemon.persistence.enabled=false)
and the StatefulSet. Argument: (dict "root" $ "dataClaim" bool), dataClaim as for ledger-deletion.volumes.
*/}}
{{- define "ledger-deletion.daemonPodTemplate" -}}
{{- $dataClaim := .dataClaim -}}
{{- with .root -}}
metadata:
  labels:
    {{- include "ledger-deletion.standardLabels" . | nindent 4 }}
    component: {{ .Values.daemon.component }}
  annotations:
    checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
    {{- with .Values.daemon.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ template "ledger-deletion.serviceAccountName" . }}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: {{ .Values.daemon.gracePeriod }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.daemon.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with .Values.daemon.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.daemon.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.daemon.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.daemon.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: ledger-deletion
      image: {{ include "ledger-deletion.image" (dict "root" . "which" "daemon") | quote }}
      imagePullPolicy: {{ .Values.images.daemon.pullPolicy }}
      args:
        {{- include "ledger-deletion.commonArgs" . | nindent 8 }}
        - run
        - --admin-address
        - "0.0.0.0:{{ .Values.daemon.adminPort }}"
        - --log-format
        - {{ .Values.daemon.logFormat }}
        {{- if .Values.daemon.dryRun }}
        - --dry-run
        {{- end }}
        {{- with .Values.daemon.extraArgs }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      env:
        {{- include "ledger-deletion.env" . | nindent 8 }}
        {{- with .Values.daemon.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        - name: http
          containerPort: {{ .Values.daemon.adminPort }}
          protocol: TCP
      {{- if .Values.daemon.probe.liveness.enabled }}
      livenessProbe:
        httpGet:
          path: /healthz
          port: http
        initialDelaySeconds: {{ .Values.daemon.probe.liveness.initialDelaySeconds }}
        periodSeconds: {{ .Values.daemon.probe.liveness.periodSeconds }}
        timeoutSeconds: {{ .Values.daemon.probe.liveness.timeoutSeconds }}
        failureThreshold: {{ .Values.daemon.probe.liveness.failureThreshold }}
      {{- end }}
      {{- if .Values.daemon.probe.readiness.enabled }}
      readinessProbe:
        httpGet:
          path: /readyz
          port: http
        initialDelaySeconds: {{ .Values.daemon.probe.readiness.initialDelaySeconds }}
        periodSeconds: {{ .Values.daemon.probe.readiness.periodSeconds }}
        timeoutSeconds: {{ .Values.daemon.probe.readiness.timeoutSeconds }}
        failureThreshold: {{ .Values.daemon.probe.readiness.failureThreshold }}
      {{- end }}
      resources:
        {{- toYaml .Values.daemon.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      volumeMounts:
        {{- include "ledger-deletion.volumeMounts" . | nindent 8 }}
  volumes:
    {{- include "ledger-deletion.volumes" (dict "root" . "dataClaim" $dataClaim) | nindent 4 }}
{{- end }}
{{- end -}}

{{/* The Secrets that reach the daemon as files: volume name -> {secretName, key, configKey}. */}}
{{- define "ledger-deletion.fileSecrets" -}}
{{- $a := .Values.auth -}}
admin-token:
  secretName: {{ required "auth.adminToken.secretName is required: the admin API listens on the pod's address" $a.adminToken.secretName }}
  key: {{ $a.adminToken.key }}
  configKey: adminTokenFile
{{- if $a.zookeeperDigest.enabled }}
zookeeper-digest:
  secretName: {{ required "auth.zookeeperDigest.secretName is required when enabled" $a.zookeeperDigest.secretName }}
  key: {{ $a.zookeeperDigest.key }}
  configKey: metadataStoreDigestFile
{{- end }}
{{- if $a.pulsarToken.enabled }}
pulsar-token:
  secretName: {{ required "auth.pulsarToken.secretName is required when enabled" $a.pulsarToken.secretName }}
  key: {{ $a.pulsarToken.key }}
  configKey: brokerAuthTokenFile
{{- end }}
{{- if $a.tls.enabled }}
tls-trust:
  secretName: {{ required "auth.tls.secretName is required when enabled" $a.tls.secretName }}
  key: {{ $a.tls.key }}
  configKey: brokerTlsTrustCertsFile
{{- end }}
{{- end -}}

{{- define "ledger-deletion.env" -}}
- name: ADMIN_PORT
  value: {{ .Values.daemon.adminPort | quote }}
{{- if .Values.auth.s3.enabled }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ required "auth.s3.secretName is required when enabled" .Values.auth.s3.secretName }}
      key: {{ .Values.auth.s3.accessKeyIdKey }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.auth.s3.secretName }}
      key: {{ .Values.auth.s3.secretAccessKeyKey }}
{{- end }}
{{- end -}}
