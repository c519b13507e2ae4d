{{/*
One entry of spec.pytorchReplicaSpecs. Called with
(dict "root" $ "role" "master"|"worker" "replicas" N). Role values override the
shared ones: maps overlay key by key, lists add up, scalars replace.
*/}}
{{- define "pytorchjob.replicaSpec" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- $role := index $v .role -}}
{{- $gpus := int (include "pytorchjob.roleGpus" .) -}}
{{- $requests := include "pytorchjob.overlay" (dict "base" $v.resources.requests "over" $role.resources.requests) | fromJson -}}
{{- $limits := include "pytorchjob.overlay" (dict "base" $v.resources.limits "over" $role.resources.limits) | fromJson -}}
{{- if gt $gpus 0 -}}
{{- $_ := set $limits $v.gpuResourceName $gpus -}}
{{- end -}}
{{- $tolerations := concat $v.tolerations $role.tolerations -}}
{{- if and (gt $gpus 0) $v.gpuToleration -}}
{{- $tolerations = append $tolerations (dict "key" $v.gpuResourceName "operator" "Exists" "effect" "NoSchedule") -}}
{{- end -}}
{{- $tolerations = concat $tolerations (include "pytorchjob.nodeLossTolerations" . | fromJsonArray) -}}
{{- $nodeSelector := include "pytorchjob.overlay" (dict "base" $v.nodeSelector "over" $role.nodeSelector) | fromJson -}}
{{- $affinity := default $v.affinity $role.affinity -}}
{{- $annotations := include "pytorchjob.overlay" (dict "base" $v.podAnnotations "over" $role.annotations) | fromJson -}}
{{- if $v.disableIstioSidecar -}}
{{- $_ := set $annotations "sidecar.istio.io/inject" "false" -}}
{{- end -}}
{{- $labels := include "pytorchjob.overlay" (dict "base" $v.podLabels "over" $role.labels) | fromJson -}}
{{- $env := list -}}
{{- if $v.output.enabled -}}
{{- $env = append $env (dict "name" "OUTPUT_DIR" "value" $v.output.mountPath) -}}
{{- end -}}
{{- $env = concat $env $v.env -}}
{{- /* A role's variable replaces a shared one of the same name, so no name appears twice. */ -}}
{{- range $role.env -}}
{{- $name := .name -}}
{{- $kept := list -}}
{{- range $env -}}{{- if ne .name $name -}}{{- $kept = append $kept . -}}{{- end -}}{{- end -}}
{{- $env = append $kept . -}}
{{- end -}}
{{- $mountOutput := and $v.output.enabled (or (eq $v.output.mountOn "all") (eq .role "master")) -}}
{{- $mounts := list -}}
{{- $volumes := list -}}
{{- if $mountOutput -}}
{{- $mounts = append $mounts (dict "name" "output" "mountPath" $v.output.mountPath) -}}
{{- $volumes = append $volumes (dict "name" "output" "persistentVolumeClaim" (dict "claimName" (include "pytorchjob.outputClaim" $root))) -}}
{{- end -}}
{{- if $v.shm.enabled -}}
{{- $mounts = append $mounts (dict "name" "dshm" "mountPath" "/dev/shm") -}}
{{- $volumes = append $volumes (dict "name" "dshm" "emptyDir" (dict "medium" "Memory" "sizeLimit" $v.shm.sizeLimit)) -}}
{{- end -}}
{{- $mounts = concat $mounts $v.extraVolumeMounts $role.extraVolumeMounts -}}
{{- $volumes = concat $volumes $v.extraVolumes $role.extraVolumes -}}
{{- $sidecars := concat $v.extraContainers $role.extraContainers -}}
{{- $ports := list -}}
{{- if not (kindIs "invalid" $v.port) -}}
{{- $ports = append $ports (dict "name" "pytorchjob-port" "containerPort" (int $v.port)) -}}
{{- end -}}
{{- $ports = concat $ports $v.extraPorts -}}
{{- $args := list -}}
{{- $backend := include "pytorchjob.backend" $root -}}
{{- if ne $backend "none" -}}
{{- $args = list "--backend" $backend -}}
{{- end -}}
{{- $args = concat $args $v.args -}}
{{- $command := include "pytorchjob.command" $root | fromJsonArray -}}
{{- $podExtra := include "pytorchjob.overlay" (dict "base" $v.podSpecExtra "over" $role.podSpecExtra) | fromJson -}}
replicas: {{ .replicas }}
{{- with default $v.restartPolicy $role.restartPolicy }}
restartPolicy: {{ . | quote }}
{{- end }}
template:
  metadata:
    labels:
      {{- include "pytorchjob.labels" $root | nindent 6 }}
      {{- with $labels }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- with $annotations }}
    annotations:
      {{- toYaml . | nindent 6 }}
    {{- end }}
  spec:
    {{- with $v.serviceAccountName }}
    serviceAccountName: {{ . | quote }}
    {{- end }}
    {{- if not (kindIs "invalid" $v.automountServiceAccountToken) }}
    automountServiceAccountToken: {{ $v.automountServiceAccountToken }}
    {{- end }}
    {{- with $v.priorityClassName }}
    priorityClassName: {{ . | quote }}
    {{- end }}
    {{- with $v.image.pullSecrets }}
    imagePullSecrets:
      {{- range . }}
      - name: {{ . | quote }}
      {{- end }}
    {{- end }}
    {{- with $v.podSecurityContext }}
    securityContext:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with $nodeSelector }}
    nodeSelector:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with $tolerations }}
    tolerations:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with $affinity }}
    affinity:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    containers:
      - name: pytorch
        image: {{ include "pytorchjob.image" $root | quote }}
        {{- with $v.image.pullPolicy }}
        imagePullPolicy: {{ . | quote }}
        {{- end }}
        {{- with $command }}
        command:
          {{- toYaml . | nindent 10 }}
        {{- end }}
        {{- with $args }}
        args:
          {{- toYaml . | nindent 10 }}
        {{- end }}
        {{- with $env }}
        env:
          {{- toYaml . | nindent 10 }}
        {{- end }}
        {{- with $v.envFrom }}
        envFrom:
          {{- toYaml . | nindent 10 }}
        {{- end }}
        {{- with $ports }}
        ports:
          {{- toYaml . | nindent 10 }}
        {{- end }}
        {{- if or $requests $limits }}
        resources:
          {{- with $requests }}
          requests:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with $limits }}
          limits:
            {{- toYaml . | nindent 12 }}
          {{- end }}
        {{- end }}
        {{- with $v.securityContext }}
        securityContext:
          {{- toYaml . | nindent 10 }}
        {{- end }}
        {{- with $mounts }}
        volumeMounts:
          {{- toYaml . | nindent 10 }}
        {{- end }}
        {{- with $v.containerExtra }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with $sidecars }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- with $volumes }}
    volumes:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with $podExtra }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}
