{{/* Names: every object is named after the release (nicpolicy-webhook, nicpolicy-config, ...). */}}
{{- define "nicpolicy.name" -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "nicpolicy.labels" -}}
app.kubernetes.io/name: nicpolicy
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Values.managedBy | default .Release.Service }}
{{- end -}}

{{/* Selector labels of one component (webhook or controller). */}}
{{- define "nicpolicy.selector" -}}
app.kubernetes.io/name: nicpolicy
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "nicpolicy.image" -}}
{{- $repository := required "image.repository: the registry path the nicpolicy image was pushed to (config/image/build.sh, docs/deploy.md \"The image\")" .Values.image.repository -}}
{{- if .Values.image.digest -}}
{{ $repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ $repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "nicpolicy.tlsSecret" -}}
{{- if eq .Values.certificates.mode "existingSecret" -}}
{{ required "certificates.existingSecret.name: the kubernetes.io/tls Secret to serve with" .Values.certificates.existingSecret.name }}
{{- else -}}
{{ include "nicpolicy.name" . }}-webhook-tls
{{- end -}}
{{- end -}}

{{/* The pod security settings both Deployments share: the image's user, nothing else. */}}
{{- define "nicpolicy.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "nicpolicy.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{/* The compiled-module cache: a subdirectory the process creates itself (mode 0700, its own);
the emptyDir is root's with mode 0777, which the cache never trusts. */}}
{{- define "nicpolicy.cacheEnv" -}}
- name: NICPOLICY_CACHE_DIR
  value: /var/cache/nicpolicy/modules
{{- end -}}

{{/* The registry section of a serve configuration (docs/registry.md). */}}
{{- define "nicpolicy.registryConfig" -}}
{{- $registry := dict "requireDigest" .Values.registry.requireDigest "onUnavailableAtStart" .Values.registry.onUnavailableAtStart -}}
{{- if .Values.registry.credentialsSecret -}}
{{- $_ := set $registry "config" "/etc/nicpolicy-registry/config.json" -}}
{{- end -}}
{{- if .Values.registry.caConfigMap -}}
{{- $_ := set $registry "caFiles" (list "/etc/nicpolicy-registry-ca/ca.pem") -}}
{{- end -}}
{{- toYaml $registry -}}
{{- end -}}

{{/* The verification section of a serve configuration: each rule's keys as files of the
mounted keys ConfigMap. */}}
{{- define "nicpolicy.verificationConfig" -}}
{{- $rules := list -}}
{{- range $i, $rule := .Values.verification.rules -}}
{{- if not $rule.references -}}
{{- fail (printf "verification.rules[%d].references: name the repositories the rule is for" $i) -}}
{{- end -}}
{{- if not $rule.keys -}}
{{- fail (printf "verification.rules[%d].keys: name keys of verification.keysConfigMap" $i) -}}
{{- end -}}
{{- $keys := list -}}
{{- range $rule.keys -}}
{{- $keys = append $keys (printf "/etc/nicpolicy-keys/%s" .) -}}
{{- end -}}
{{- $rules = append $rules (dict "references" $rule.references "keys" $keys) -}}
{{- end -}}
{{- toYaml (dict "rules" $rules) -}}
{{- end -}}

{{/* Mounts of the registry credentials and CA, and the signature keys, when given. */}}
{{- define "nicpolicy.registryMounts" -}}
{{- if .Values.registry.credentialsSecret }}
- name: registry-credentials
  mountPath: /etc/nicpolicy-registry
  readOnly: true
{{- end }}
{{- if .Values.registry.caConfigMap }}
- name: registry-ca
  mountPath: /etc/nicpolicy-registry-ca
  readOnly: true
{{- end }}
{{- if .Values.verification.rules }}
- name: verification-keys
  mountPath: /etc/nicpolicy-keys
  readOnly: true
{{- end }}
{{- end -}}

{{/* Volumes of the registry credentials (the Secret's .dockerconfigjson as config.json, the
file docker reads) and CA, when given. */}}
{{- define "nicpolicy.registryVolumes" -}}
{{- if .Values.registry.credentialsSecret }}
- name: registry-credentials
  secret:
    secretName: {{ .Values.registry.credentialsSecret }}
    items:
      - key: .dockerconfigjson
        path: config.json
{{- end }}
{{- if .Values.registry.caConfigMap }}
- name: registry-ca
  configMap:
    name: {{ .Values.registry.caConfigMap }}
    items:
      - key: ca.pem
        path: ca.pem
{{- end }}
{{- if .Values.verification.rules }}
- name: verification-keys
  configMap:
    name: {{ required "verification.keysConfigMap: the ConfigMap holding the public keys the rules name" .Values.verification.keysConfigMap }}
{{- end }}
{{- end -}}

{{/*
The controller's report format, checked: openreports or wgpolicyk8s.
*/}}
{{- define "nicpolicy.reportFormat" -}}
{{- $format := .Values.controller.reports.format -}}
{{- if not (has $format (list "openreports" "wgpolicyk8s")) -}}
{{- fail (printf "controller.reports.format: %q is neither openreports nor wgpolicyk8s" $format) -}}
{{- end -}}
{{- $format -}}
{{- end -}}

{{/*
Whether to install the report CRD: controller.installReportCRD, and false when the value's
name before, controller.installPolicyReportCRD, is set false. Non-empty means yes.
*/}}
{{- define "nicpolicy.installReportCRD" -}}
{{- if and .Values.controller.installReportCRD (ne (toString .Values.controller.installPolicyReportCRD) "false") -}}
true
{{- end -}}
{{- end -}}

{{/*
The built-in policy whose backstop the chart renders for a kind (dict "root" . "kind" KIND):
the chain's first entry when it is an enforced built-in policy with inline settings (a
settingsFile is read by the pods, not the chart); empty otherwise.
*/}}
{{- define "nicpolicy.backstopPolicy" -}}
{{- $file := .root.Files.Get "files/backstop.yaml" | fromYaml }}
{{- $entry := first (index .root.Values.policies .kind | default list) | default dict }}
{{- $policy := $entry.builtin | default "" | trimPrefix "builtin:" }}
{{- if and $policy (ne (lower ($entry.mode | default "enforce")) "warn") (hasKey $file.policies $policy) (not (hasKey $entry "settingsFile")) }}
{{- $policy }}
{{- end }}
{{- end }}

{{/* The file of an org VDC's refreshed inventory: what Cloud Director's refresh writes
(clouddirector::file::file_name), a ConfigMap key. */}}
{{- define "nicpolicy.vdcFile" -}}
{{- printf "%s.yaml" (regexReplaceAll "^\\.+" (regexReplaceAll "[^A-Za-z0-9._-]" . "-") "") -}}
{{- end }}

{{/* The ConfigMap mount of the refreshed inventories (webhook and controller). */}}
{{- define "nicpolicy.cloudDirectorMount" -}}
{{- if .Values.cloudDirector.enabled }}
- name: cloud-director
  mountPath: /etc/nicpolicy-cloud-director
  readOnly: true
{{- end }}
{{- end }}

{{/* Its volume: optional, so a pod starts before the first refresh wrote it. */}}
{{- define "nicpolicy.cloudDirectorVolume" -}}
{{- if .Values.cloudDirector.enabled }}
- name: cloud-director
  configMap:
    name: {{ include "nicpolicy.name" . }}-inventories
    optional: true
{{- end }}
{{- end }}
