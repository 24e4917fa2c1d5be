{{/* Names and labels shared by every object. */}}
{{- define "tributary.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tributary.labels" -}}
app.kubernetes.io/name: tributary
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "tributary.selector" -}}
app.kubernetes.io/name: tributary
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The ClickHouse connection flags of a component; user is the ClickHouse user, key its password's key in the Secret. */}}
{{- define "tributary.clickhouseArgs" -}}
- --clickhouse-addr={{ .root.Values.clickhouse.addr }}
- --clickhouse-db={{ .root.Values.clickhouse.database }}
- --clickhouse-user={{ .user }}
- --clickhouse-password-file=/etc/tributary/clickhouse/{{ .key }}
{{- if .root.Values.clickhouse.tls }}
- --clickhouse-tls
- --clickhouse-ca-file=/etc/tributary/clickhouse-tls/ca.crt
{{- end }}
{{- end -}}

{{- define "tributary.clickhouseVolumes" -}}
- name: clickhouse
  secret:
    secretName: {{ .Values.clickhouse.clickhouseSecret }}
    defaultMode: 0400
{{- if .Values.clickhouse.tls }}
- name: clickhouse-tls
  secret:
    secretName: {{ required "clickhouse.tlsSecret is required with clickhouse.tls" .Values.clickhouse.tlsSecret }}
{{- end }}
{{- end -}}

{{- define "tributary.clickhouseMounts" -}}
- name: clickhouse
  mountPath: /etc/tributary/clickhouse
  readOnly: true
{{- if .Values.clickhouse.tls }}
- name: clickhouse-tls
  mountPath: /etc/tributary/clickhouse-tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "tributary.securityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* Probes on a component's metrics port: /healthz answers while the process runs. */}}
{{- define "tributary.healthProbes" -}}
livenessProbe:
  httpGet: {path: /healthz, port: metrics}
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /healthz, port: metrics}
  periodSeconds: 5
{{- end -}}
