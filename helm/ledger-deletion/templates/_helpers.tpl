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
- /var/lib/ledger-deletion/data
{{- end -}}

{{/* Volumes both workloads mount: the config file, the referenced Secrets, scratch space. */}}
{{- define "ledger-deletion.volumes" -}}
- name: config
  configMap:
    name: {{ template "ledger-deletion.fullname" . }}
- name: data
  emptyDir: {}
- name: tmp
  emptyDir: {}
{{- range $name, $secret := (include "ledger-deletion.fileSecrets" . | fromYaml) }}
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
  mountPath: /var/lib/ledger-deletion/data
- name: tmp
  mountPath: /tmp
{{- range $name, $secret := (include "ledger-deletion.fileSecrets" . | fromYaml) }}
- name: {{ $name }}
  mountPath: {{ include "ledger-deletion.secretDir" $ }}/{{ $name }}
  readOnly: true
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
