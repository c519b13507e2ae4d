{{- define "pytorch-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "pytorch-operator.fullname" -}}
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

{{- define "pytorch-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "pytorch-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pytorch-operator.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{- define "pytorch-operator.labels" -}}
helm.sh/chart: {{ include "pytorch-operator.chart" . | quote }}
{{ include "pytorch-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/part-of: kubeflow-training
{{- end -}}

{{/* The namespace of every namespaced object. */}}
{{- define "pytorch-operator.namespace" -}}
{{- default .Release.Namespace .Values.namespace.name -}}
{{- end -}}

{{- define "pytorch-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "pytorch-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Secret the operator rotates its webhook certificate into; it must exist beforehand. */}}
{{- define "pytorch-operator.webhookSecretName" -}}
{{- printf "%s-webhook-cert" (include "pytorch-operator.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "pytorch-operator.webhookServiceName" -}}
{{- include "pytorch-operator.fullname" . -}}
{{- end -}}

{{- define "pytorch-operator.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- end -}}
{{- end -}}

{{/* Leader election is required as soon as two replicas could reconcile at once. */}}
{{- define "pytorch-operator.leaderElect" -}}
{{- if or .Values.leaderElection (gt (int .Values.replicas) 1) -}}true{{- end -}}
{{- end -}}

{{/* The API group of the gang scheduler's PodGroups. */}}
{{- define "pytorch-operator.podGroupAPIGroup" -}}
{{- if eq .Values.gangScheduling.scheduler "volcano" -}}scheduling.volcano.sh{{- else -}}scheduling.x-k8s.io{{- end -}}
{{- end -}}

{{/*
One operator per cluster: it watches every namespace (or the one named) and owns the one
PyTorchJob webhook and CRD, so a second release would reconcile the same jobs twice. lookup
reads the cluster during helm install and upgrade only; helm template and the generator's
render see an empty cluster and skip this.
*/}}
{{- define "pytorch-operator.oneOperator" -}}
{{- $ns := include "pytorch-operator.namespace" . }}
{{- range (lookup "apps/v1" "Deployment" "" "").items }}
{{- $labels := .metadata.labels | default dict }}
{{- $owner := get (.metadata.annotations | default dict) "meta.helm.sh/release-name" }}
{{- if and (eq (get $labels "app.kubernetes.io/part-of") "kubeflow-training") (eq (get $labels "app.kubernetes.io/component") "controller") (or (ne $owner $.Release.Name) (ne .metadata.namespace $ns)) }}
{{- fail (printf "the training operator already runs in this cluster: Deployment %s/%s of release %q. One operator serves the whole cluster; change that release with `helm upgrade %s charts/pytorch-operator -n %s`, or `helm uninstall` it first" .metadata.namespace .metadata.name $owner $owner .metadata.namespace) }}
{{- end }}
{{- end }}
{{- if .Values.crds.install }}
{{- $crd := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" "pytorchjobs.kubeflow.org" }}
{{- if $crd }}
{{- $annotations := $crd.metadata.annotations | default dict }}
{{- $owner := get $annotations "meta.helm.sh/release-name" }}
{{- $ownerNs := get $annotations "meta.helm.sh/release-namespace" }}
{{- if and $owner (or (ne $owner .Release.Name) (ne $ownerNs .Release.Namespace)) }}
{{- fail (printf "the CRD pytorchjobs.kubeflow.org belongs to release %q of namespace %q (kept by crds.keep when it was uninstalled). Install under that name and namespace to adopt it, or set crds.install=false to leave it as it is" $owner $ownerNs) }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}
