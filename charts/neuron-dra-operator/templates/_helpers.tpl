{{/* The chart name, or nameOverride. */}}
{{- define "neuron-dra-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name: the release name when it already contains the chart name (so the release
"neuron-dra-operator" names objects as `kubectl apply -k config/default` does), else "<release>-<chart>".
*/}}
{{- define "neuron-dra-operator.fullname" -}}
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

{{/* The operator's ServiceAccount: serviceAccount.name, else the full name (created or not by serviceAccount.create). */}}
{{- define "neuron-dra-operator.serviceAccountName" -}}
{{- default (include "neuron-dra-operator.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{/* Labels of every object: the kustomize ones plus Helm's. */}}
{{- define "neuron-dra-operator.labels" -}}
app.kubernetes.io/name: {{ include "neuron-dra-operator.name" . }}
{{ include "neuron-dra-operator.helmLabels" . }}
{{- end }}

{{/* Helm's labels alone: the CRD's (kustomize's CRD has none). */}}
{{- define "neuron-dra-operator.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The operator pods' labels, which the Deployment, the Service, the PodDisruptionBudget and the topology spread
select; the instance keeps two releases in one namespace apart. */}}
{{- define "neuron-dra-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "neuron-dra-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{/* The operator's user name, as the API server sees its ServiceAccount's token. */}}
{{- define "neuron-dra-operator.user" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "neuron-dra-operator.serviceAccountName" . }}
{{- end }}

{{/* A CEL list of string literals: ['a', 'b']. values.schema.json keeps quotes and backslashes out of the entries. */}}
{{- define "neuron-dra-operator.celList" -}}
[{{- range $i, $item := . -}}{{- if $i }}, {{ end -}}'{{ $item }}'{{- end -}}]
{{- end }}

{{/* Sets the install variables of a policy spec from config/rbac (namespacePatterns, imagePatterns, operators,
kubeletDirs, priorityClasses, tokenMinters, deviceClassPatterns, extendedResources, maxCpu, maxMemory) to this release's allow-list (fence.*) and ServiceAccount: called with (dict "spec" SPEC "root" $),
changes SPEC. */}}
{{- define "neuron-dra-operator.installVariables" -}}
{{- $root := .root -}}
{{- $lists := dict "namespacePatterns" $root.Values.fence.driverNamespaces "imagePatterns" $root.Values.fence.imageRepositories "kubeletDirs" $root.Values.fence.kubeletDirs "operators" (list (include "neuron-dra-operator.user" $root)) "priorityClasses" $root.Values.fence.priorityClasses "tokenMinters" $root.Values.fence.tokenMinters "deviceClassPatterns" $root.Values.fence.deviceClasses "extendedResources" $root.Values.fence.extendedResources -}}
{{- $strings := dict "maxCpu" (toString $root.Values.fence.maxCpu) "maxMemory" (toString $root.Values.fence.maxMemory) -}}
{{- range $variable := .spec.variables -}}
{{- if hasKey $lists $variable.name -}}
{{- $_ := set $variable "expression" (include "neuron-dra-operator.celList" (get $lists $variable.name)) -}}
{{- end -}}
{{- if hasKey $strings $variable.name -}}
{{- $_ := set $variable "expression" (printf "'%s'" (get $strings $variable.name)) -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
The operator image: image.repository with its registry replaced by global.imageRegistry when that is set (the first
path element is a registry when it has a dot or a port, or is localhost, as container runtimes read it), then
@image.digest when set, else :image.tag (default the chart's appVersion).
*/}}
{{- define "neuron-dra-operator.image" -}}
{{- $repository := .Values.image.repository -}}
{{- $registry := (.Values.global).imageRegistry | default "" | trimSuffix "/" -}}
{{- if $registry -}}
{{- $parts := splitList "/" $repository -}}
{{- $first := first $parts -}}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) -}}
{{- $parts = rest $parts -}}
{{- end -}}
{{- $repository = printf "%s/%s" $registry (join "/" $parts) -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end }}

{{/*
The Secret whose tls.crt and tls.key /metrics presents and whose ca.crt Prometheus verifies them against:
metrics.certSecret (cert-manager's, say); else, with the ServiceMonitor on, the chart's own (metrics-cert.yaml);
else none (a self-signed certificate made at start, which nothing can verify).
*/}}
{{- define "neuron-dra-operator.metricsCertSecret" -}}
{{- if .Values.metrics.certSecret -}}
{{- .Values.metrics.certSecret -}}
{{- else if .Values.metrics.serviceMonitor.enabled -}}
{{- include "neuron-dra-operator.fullname" . }}-metrics-cert
{{- end -}}
{{- end }}
