{{- define "pgflow-wasm.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "pgflow-wasm.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pgflow-wasm.labels" -}}
{{ include "pgflow-wasm.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "pgflow-wasm.secretName" -}}
{{- if .Values.database.existingSecret -}}
{{- .Values.database.existingSecret -}}
{{- else if .Values.database.url -}}
{{- include "pgflow-wasm.fullname" . }}-database
{{- else -}}
{{- fail "database: set existingSecret (a Secret holding the database URL) or url" -}}
{{- end -}}
{{- end -}}

{{- define "pgflow-wasm.flowsConfigMap" -}}
{{- if .Values.flows.configMap -}}
{{- .Values.flows.configMap -}}
{{- else if .Values.flows.inline -}}
{{- include "pgflow-wasm.fullname" . }}-flows
{{- end -}}
{{- end -}}

{{/*
The KEDA query: files/visible-messages.sql (the file deploy/keda_test.go runs against
PostgreSQL) without its comment lines, the queues as a SQL array.
*/}}
{{- define "pgflow-wasm.kedaQuery" -}}
{{- $queues := list -}}
{{- range required "keda.queues: name the queues to count (each served flow's slug)" .Values.keda.queues -}}
{{- if not (regexMatch "^[A-Za-z_][A-Za-z0-9_]{0,47}$" .) -}}
{{- fail (printf "keda.queues: %q is not a pgflow queue name (letters, digits, _)" .) -}}
{{- end -}}
{{- $queues = append $queues (printf "'%s'" .) -}}
{{- end -}}
{{- if not $queues -}}
{{- fail "keda.queues: name the queues to count (each served flow's slug)" -}}
{{- end -}}
{{- $sql := regexReplaceAll "(?m)^--.*\n" (.Files.Get "files/visible-messages.sql") "" -}}
{{- replace "__QUEUES__" (printf "ARRAY[%s]" (join "," $queues)) $sql | trim -}}
{{- end -}}

{{- define "pgflow-wasm.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "pgflow-wasm.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}
