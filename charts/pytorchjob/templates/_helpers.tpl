{{/* Chart name, overridable. */}}
{{- define "pytorchjob.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release full name; the release name alone when it already contains the chart name. */}}
{{- define "pytorchjob.fullname" -}}
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

{{- define "pytorchjob.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "pytorchjob.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pytorchjob.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{- define "pytorchjob.labels" -}}
helm.sh/chart: {{ include "pytorchjob.chart" . | quote }}
{{ include "pytorchjob.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/component: training
{{- end -}}

{{/*
The job name. Pods are named <job>-master-0 and <job>-worker-<i>, and the operator
makes a Service of the same name for each, so the name must leave room for the
longest suffix within a 63-character DNS label.
*/}}
{{- define "pytorchjob.jobName" -}}
{{- $name := default (include "pytorchjob.fullname" .) .Values.job.name -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $name) -}}
{{- fail (printf "job.name: %q is not a DNS-1035 label; use lower-case letters, digits and '-', starting with a letter and ending with a letter or digit" $name) -}}
{{- end -}}
{{- $suffix := "-master-0" -}}
{{- if gt (int .Values.topology.workers) 0 -}}
{{- $suffix = printf "-worker-%d" (sub (int .Values.topology.workers) 1) -}}
{{- end -}}
{{- if gt (add (len $name) (len $suffix)) 63 -}}
{{- fail (printf "job.name: %q (%d characters) leaves no room for the pod name %s%s within 63 characters; use at most %d characters" $name (len $name) $name $suffix (sub 63 (len $suffix))) -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{/* The image: a digest wins, then a tag; with neither, the chart's appVersion, as its CUDA
variant (<version>-cuda) when any pod has GPUs, since the CPU build carries no CUDA libraries. */}}
{{- define "pytorchjob.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else if .Values.image.tag -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- else -}}
{{- $gpus := 0 -}}
{{- if .Values.topology.master -}}
{{- $gpus = add $gpus (include "pytorchjob.roleGpus" (dict "root" . "role" "master") | int) -}}
{{- end -}}
{{- if gt (int .Values.topology.workers) 0 -}}
{{- $gpus = add $gpus (include "pytorchjob.roleGpus" (dict "root" . "role" "worker") | int) -}}
{{- end -}}
{{- printf "%s:%s%s" .Values.image.repository .Chart.AppVersion (ternary "-cuda" "" (gt (int $gpus) 0)) -}}
{{- end -}}
{{- end -}}

{{- define "pytorchjob.outputClaim" -}}
{{- default (printf "%s-output" (include "pytorchjob.jobName" .)) .Values.output.existingClaim -}}
{{- end -}}

{{/* GPUs of one role ("master" or "worker"): the role's own count, else the shared one. */}}
{{- define "pytorchjob.roleGpus" -}}
{{- $role := index .root.Values .role -}}
{{- if kindIs "invalid" $role.resources.gpus -}}
{{- int .root.Values.resources.gpus -}}
{{- else -}}
{{- int $role.resources.gpus -}}
{{- end -}}
{{- end -}}

{{/* The resolved backend: auto becomes nccl only when every rendered role has GPUs. */}}
{{- define "pytorchjob.backend" -}}
{{- $b := .Values.topology.backend -}}
{{- if eq $b "auto" -}}
{{- $all := true -}}
{{- if .Values.topology.master -}}
{{- if eq (include "pytorchjob.roleGpus" (dict "root" . "role" "master")) "0" -}}{{- $all = false -}}{{- end -}}
{{- end -}}
{{- if gt (int .Values.topology.workers) 0 -}}
{{- if eq (include "pytorchjob.roleGpus" (dict "root" . "role" "worker")) "0" -}}{{- $all = false -}}{{- end -}}
{{- end -}}
{{- ternary "nccl" "gloo" $all -}}
{{- else -}}
{{- $b -}}
{{- end -}}
{{- end -}}

{{/* The container command; torchrun when the launcher asks for it and the user gave none.
An elastic job needs torchrun: only its agent joins the rendezvous again when Workers scale. */}}
{{- define "pytorchjob.command" -}}
{{- $cmd := .Values.command -}}
{{- if not $cmd -}}
{{- $nproc := toString .Values.topology.nprocPerNode -}}
{{- $auto := or .Values.elasticPolicy.enabled (and (ne $nproc "") (ne $nproc "1")) -}}
{{- if or (eq .Values.launcher "torchrun") (and (eq .Values.launcher "auto") $auto) -}}
{{- $cmd = list "torchrun" "--module" "trainer" -}}
{{- end -}}
{{- end -}}
{{- toJson $cmd -}}
{{- end -}}

{{/*
A shared map with a role's keys laid over it, as JSON. Keys are set one by one so that
false, 0 and "" in the role still win (sprig's merge treats them as unset).
*/}}
{{- define "pytorchjob.overlay" -}}
{{- $out := deepCopy (default dict .base) -}}
{{- range $k, $v := .over -}}
{{- $_ := set $out $k $v -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/*
The NoExecute tolerations of a node that stops answering (not-ready, unreachable) with
nodeLossTolerationSeconds, as JSON; none when it is null, so that Kubernetes adds its own 300 s.
Called with (dict "root" $ "role" "master"|"worker"). A toleration of the user's own for either
key would give the pod two deadlines, of which Kubernetes takes the shorter: refused by name.
*/}}
{{- define "pytorchjob.nodeLossTolerations" -}}
{{- $v := .root.Values -}}
{{- $seconds := $v.nodeLossTolerationSeconds -}}
{{- $out := list -}}
{{- if not (kindIs "invalid" $seconds) -}}
{{- $keys := list "node.kubernetes.io/not-ready" "node.kubernetes.io/unreachable" -}}
{{- $lists := dict "tolerations" $v.tolerations (printf "%s.tolerations" .role) (index $v .role).tolerations -}}
{{- range $field, $list := $lists -}}
{{- range $i, $t := $list -}}
{{- if and (has $t.key $keys) (has (default "" $t.effect) (list "" "NoExecute")) -}}
{{- fail (printf "%s[%d]: tolerates %s, whose NoExecute deadline nodeLossTolerationSeconds (%d) sets; drop this toleration, or leave nodeLossTolerationSeconds unset (null) and keep your own" $field $i $t.key (int $seconds)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $keys -}}
{{- $out = append $out (dict "key" . "operator" "Exists" "effect" "NoExecute" "tolerationSeconds" (int $seconds)) -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
