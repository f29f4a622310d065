{{/*
Names. Kubernetes names are limited to 63 characters (DNS labels).
*/}}
{{- define "kwd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kwd.fullname" -}}
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

{{- define "kwd.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Component names leave room for the suffix within 63 characters. */}}
{{- define "kwd.controller.fullname" -}}
{{- printf "%s-controller" (include "kwd.fullname" . | trunc 52 | trimSuffix "-") }}
{{- end }}

{{- define "kwd.proxy.fullname" -}}
{{- printf "%s-proxy" (include "kwd.fullname" . | trunc 57 | trimSuffix "-") }}
{{- end }}

{{- define "kwd.proxyAdmin.fullname" -}}
{{- printf "%s-proxy-admin" (include "kwd.fullname" . | trunc 51 | trimSuffix "-") }}
{{- end }}

{{- define "kwd.controller.serviceAccountName" -}}
{{- if .Values.controller.serviceAccount.create }}
{{- default (include "kwd.controller.fullname" .) .Values.controller.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.controller.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kwd.affinityKeySecretName" -}}
{{- default (printf "%s-affinity-key" (include "kwd.fullname" . | trunc 50 | trimSuffix "-")) .Values.proxy.affinityKey.existingSecret }}
{{- end }}

{{/*
Where proxies stream snapshots from: the controller Service's gRPC port. The
cluster-local DNS name also works from sidecars in other namespaces.
*/}}
{{- define "kwd.controllerAddress" -}}
{{- printf "%s.%s.svc:%d" (include "kwd.controller.fullname" .) .Release.Namespace (int .Values.controller.grpcPort) }}
{{- end }}

{{/*
Mutual TLS on the snapshot gRPC port (values grpcTLS). Each Secret holds
tls.crt, tls.key and ca.crt (cert-manager's layout): the controller's serving
certificate with the CA of the proxies' client certificates, and the proxies'
client certificate with the CA of the controller's certificate.
*/}}
{{- define "kwd.grpcTLS.controllerSecretName" -}}
{{- if eq .Values.grpcTLS.provider "existing" }}
{{- required "grpcTLS.existingSecrets.controller is required with grpcTLS.provider=existing" .Values.grpcTLS.existingSecrets.controller }}
{{- else if eq .Values.grpcTLS.provider "job" }}
{{- printf "%s-grpc-controller-cert" (include "kwd.fullname" . | trunc 40 | trimSuffix "-") }}
{{- else }}
{{- printf "%s-grpc-controller-tls" (include "kwd.fullname" . | trunc 43 | trimSuffix "-") }}
{{- end }}
{{- end }}

{{- define "kwd.grpcTLS.proxySecretName" -}}
{{- if eq .Values.grpcTLS.provider "existing" }}
{{- required "grpcTLS.existingSecrets.proxy is required with grpcTLS.provider=existing" .Values.grpcTLS.existingSecrets.proxy }}
{{- else if eq .Values.grpcTLS.provider "job" }}
{{- printf "%s-grpc-proxy-cert" (include "kwd.fullname" . | trunc 45 | trimSuffix "-") }}
{{- else }}
{{- printf "%s-grpc-proxy-tls" (include "kwd.fullname" . | trunc 48 | trimSuffix "-") }}
{{- end }}
{{- end }}

{{/* provider job: the Secret holding the release's gRPC CA (certificate and key). */}}
{{- define "kwd.grpcTLS.caSecretName" -}}
{{- printf "%s-grpc-ca" (include "kwd.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{/* The names in the controller's certificate: its Service, as proxies and sidecars dial it. */}}
{{- define "kwd.grpcTLS.controllerDnsNames" -}}
{{- $name := include "kwd.controller.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- list $name (printf "%s.%s" $name $ns) (printf "%s.%s.svc" $name $ns) (printf "%s.%s.svc.cluster.local" $name $ns) | toJson }}
{{- end }}

{{/* A Service's DNS names, comma-separated, for --admin-allowed-hosts (dict "root" . "name" NAME "extra" LIST). */}}
{{- define "kwd.serviceHostNames" -}}
{{- $ns := .root.Release.Namespace }}
{{- $names := list .name (printf "%s.%s" .name $ns) (printf "%s.%s.svc" .name $ns) (printf "%s.%s.svc.cluster.local" .name $ns) }}
{{- concat $names (.extra | default list) | join "," }}
{{- end }}

{{- define "kwd.grpcTLS.controllerMountPath" -}}/etc/kwd/grpc-tls{{- end }}
{{- define "kwd.grpcTLS.proxyMountPath" -}}/etc/kwd/controller-tls{{- end }}

{{/* kwd-controller serve flags for mutual TLS (list items). */}}
{{- define "kwd.grpcTLS.controllerArgs" -}}
{{- $dir := include "kwd.grpcTLS.controllerMountPath" . }}
- --grpc-tls-cert
- {{ $dir }}/tls.crt
- --grpc-tls-key
- {{ $dir }}/tls.key
- --grpc-client-ca
- {{ $dir }}/ca.crt
{{- end }}

{{/* kwd-proxy serve flags for mutual TLS to the controller (list items). */}}
{{- define "kwd.grpcTLS.proxyArgs" -}}
{{- $dir := include "kwd.grpcTLS.proxyMountPath" . }}
- --controller-ca
- {{ $dir }}/ca.crt
- --controller-cert
- {{ $dir }}/tls.crt
- --controller-key
- {{ $dir }}/tls.key
{{- end }}

{{/*
Labels. Selector labels never change across upgrades (Deployment selectors
are immutable); the rest may.
*/}}
{{- define "kwd.labels" -}}
helm.sh/chart: {{ include "kwd.chart" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kwd
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Usage: include "kwd.selectorLabels" (dict "root" . "component" "proxy") */}}
{{- define "kwd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kwd.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Usage: include "kwd.componentLabels" (dict "root" . "component" "proxy") */}}
{{- define "kwd.componentLabels" -}}
{{ include "kwd.labels" .root }}
{{ include "kwd.selectorLabels" . }}
{{- end }}

{{- define "kwd.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Restricted Pod Security Standard (pod and container level). The image's user
is 65532 as well; the numbers here make runAsNonRoot checkable without
inspecting the image.
*/}}
{{- define "kwd.podSecurityContext" -}}
{{- if kindIs "map" .Values.podSecurityContext }}
{{- toYaml .Values.podSecurityContext }}
{{- else }}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}
{{- end }}

{{- define "kwd.containerSecurityContext" -}}
{{- if kindIs "map" .Values.containerSecurityContext }}
{{- toYaml .Values.containerSecurityContext }}
{{- else }}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
privileged: false
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end }}
{{- end }}

{{/*
A probe: the component's value when set (it replaces the default whole, so
another handler such as exec or tcpSocket works), else the default.
Usage: include "kwd.probe" (dict "override" $p.livenessProbe "default" (dict ...))
*/}}
{{- define "kwd.probe" -}}
{{- if .override }}
{{- toYaml .override }}
{{- else }}
{{- toYaml .default }}
{{- end }}
{{- end }}

{{/* The Deployment strategy: the component's updateStrategy, else a surge-only rolling update. */}}
{{- define "kwd.updateStrategy" -}}
{{- if . }}
{{- toYaml . }}
{{- else }}
type: RollingUpdate
rollingUpdate:
  maxUnavailable: 0
  maxSurge: 1
{{- end }}
{{- end }}

{{/*
Rolls the proxy pods when the affinity key's source changes (another Secret
or key). A new key in the same Secret needs no restart: the kubelet updates
the mounted file and kwd-proxy reloads it, accepting the previous key for
proxy.affinityKey.gracePeriod.
*/}}
{{- define "kwd.affinityKeyChecksum" -}}
{{- dict "secret" (include "kwd.affinityKeySecretName" .) "key" .Values.proxy.affinityKey.secretKey | toJson | sha256sum }}
{{- end }}

{{/* Soft anti-affinity: replicas on different nodes when the scheduler can. */}}
{{- define "kwd.spreadAffinity" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "kwd.selectorLabels" . | nindent 12 }}
{{- end }}

{{- define "kwd.proxy.terminationGracePeriodSeconds" -}}
{{- $p := .Values.proxy }}
{{- if gt (int $p.terminationGracePeriodSeconds) 0 }}
{{- if le (int $p.terminationGracePeriodSeconds) (add $p.preStopSleepSeconds $p.drainTimeoutSeconds | int) }}
{{- fail (printf "proxy.terminationGracePeriodSeconds (%d) must exceed preStopSleepSeconds + drainTimeoutSeconds (%d)" (int $p.terminationGracePeriodSeconds) (add $p.preStopSleepSeconds $p.drainTimeoutSeconds | int)) }}
{{- end }}
{{- int $p.terminationGracePeriodSeconds }}
{{- else }}
{{- add $p.preStopSleepSeconds $p.drainTimeoutSeconds 5 }}
{{- end }}
{{- end }}

{{/*
The kwd-proxy sidecar container, for a client workload's pod spec:

  containers:
    - name: my-client
      ...
    {{- include "kwd.proxySidecar" . | nindent 4 }}
  volumes:
    - name: kwd-affinity-key
      secret:
        secretName: <a copy of the release's affinity-key Secret>
    - name: kwd-sidecar-tmp
      emptyDir: {}
    - name: kwd-controller-tls        # with grpcTLS.enabled (the default)
      secret:
        secretName: <a copy of the release's <fullname>-grpc-proxy-tls Secret>

The client then sends its requests to http://127.0.0.1:15080 (sidecar.listen).
The sidecar drains like the shared proxy: a preStop sleep, then SIGTERM.
*/}}
{{- define "kwd.proxySidecar" -}}
- name: kwd-proxy
  image: {{ include "kwd.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["/usr/local/bin/kwd-proxy"]
  args:
    - serve
    - --controller
    - {{ include "kwd.controllerAddress" . }}
    - --node-id
    - $(POD_NAME).$(POD_NAMESPACE)
    - --listen
    - {{ .Values.sidecar.listen | quote }}
    - --admin-listen
    - {{ printf "0.0.0.0:%d" (int .Values.sidecar.adminPort) | quote }}
    - --workers
    - {{ .Values.sidecar.workers | quote }}
    - --drain-timeout
    - {{ printf "%ds" (int .Values.proxy.drainTimeoutSeconds) }}
    - --affinity-key-file
    - /etc/kwd/affinity/{{ .Values.proxy.affinityKey.secretKey }}
    - --affinity-key-grace
    - {{ .Values.proxy.affinityKey.gracePeriod }}
    - --log-level
    - {{ .Values.proxy.logLevel }}
    {{- if .Values.proxy.snapshotCache }}
    # In the kwd-sidecar-tmp emptyDir: a restarted sidecar serves at once.
    - --snapshot-cache
    - /tmp/kwd-snapshot.json
    {{- end }}
    {{- if .Values.grpcTLS.enabled }}
    {{- include "kwd.grpcTLS.proxyArgs" . | nindent 4 }}
    {{- end }}
  env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
  ports:
    - name: kwd-admin
      containerPort: {{ .Values.sidecar.adminPort }}
      protocol: TCP
  livenessProbe:
    httpGet:
      path: /healthz
      port: {{ .Values.sidecar.adminPort }}
    periodSeconds: 10
    failureThreshold: 3
  readinessProbe:
    httpGet:
      path: /readyz
      port: {{ .Values.sidecar.adminPort }}
    periodSeconds: 5
    failureThreshold: 2
  lifecycle:
    preStop:
      exec:
        command: ["/bin/sleep", "{{ .Values.proxy.preStopSleepSeconds }}"]
  resources:
    {{- toYaml .Values.sidecar.resources | nindent 4 }}
  securityContext:
    {{- include "kwd.containerSecurityContext" . | nindent 4 }}
  volumeMounts:
    - name: kwd-affinity-key
      mountPath: /etc/kwd/affinity
      readOnly: true
    - name: kwd-sidecar-tmp
      mountPath: /tmp
    {{- if .Values.grpcTLS.enabled }}
    - name: kwd-controller-tls
      mountPath: {{ include "kwd.grpcTLS.proxyMountPath" . }}
      readOnly: true
    {{- end }}
{{- end }}

{{/*
What the controller reads and writes, nothing more (README "Run the
controller", RBAC table; controller/pipeline/kube_source.cc, status.cc,
controller/kube/leader_elector.cc): list+watch on everything it follows,
patch on the two status subresources (merge patch), and its own Lease.
*/}}
{{- define "kwd.controller.watchRules" -}}
- apiGroups: ["dispatch.kwd.io"]
  resources: ["logongroups", "urlmappings", "sapsystems"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["dispatch.kwd.io"]
  resources: ["logongroups/status", "urlmappings/status", "sapsystems/status"]
  verbs: ["patch"]
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["list", "watch"]
# Pod annotations dispatch.kwd.io/capacity and dispatch.kwd.io/instance-name.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
{{- if .Values.controller.rbac.readSecrets }}
# UrlMapping.spec.tls: kubernetes.io/tls Secrets in the watched namespaces
# only (a Role per namespace with watchNamespaces). The controller keeps only
# the Secrets a UrlMapping names.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "list", "watch"]
{{- end }}
# Events about rejected LogonGroups/UrlMappings (in their namespaces) and
# leadership changes (controller/kube/event_recorder.cc).
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/*
runbook_url of an alert: its section in kwd's docs/troubleshooting.md (the
heading is the alert's name, so the anchor is the name in lower case).
prometheusRule.runbookBaseUrl is where that page is served; empty: the path
in kwd's source tree.
*/}}
{{- define "kwd.runbookUrl" -}}
{{- $base := .root.Values.prometheusRule.runbookBaseUrl | default "docs/troubleshooting.md" -}}
{{- printf "%s#%s" $base (lower .alert) -}}
{{- end }}

{{/* The peers allowed to reach the admin ports (Prometheus): a list. */}}
{{- define "kwd.networkPolicy.adminFrom" -}}
{{- $np := .Values.networkPolicy -}}
- namespaceSelector:
    {{- toYaml $np.adminNamespaceSelector | nindent 4 }}
  {{- with $np.adminPodSelector }}
  podSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- with $np.adminExtraFrom }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The pod template of the grpcTLS.provider=job Jobs (dict root, serviceAccount):
kwd-controller ensure-grpc-certs for the release's three gRPC Secrets.
*/}}
{{- define "kwd.grpcTLS.jobPod" -}}
{{- $root := .root }}
{{- $job := $root.Values.grpcTLS.job }}
metadata:
  labels:
    {{- include "kwd.componentLabels" (dict "root" $root "component" "grpc-certs") | nindent 4 }}
spec:
  serviceAccountName: {{ .serviceAccount }}
  restartPolicy: Never
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- include "kwd.podSecurityContext" $root | nindent 4 }}
  containers:
    - name: ensure-grpc-certs
      image: {{ include "kwd.image" $root }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      command: ["/usr/local/bin/kwd-controller"]
      args:
        - ensure-grpc-certs
        - --namespace
        - {{ $root.Release.Namespace }}
        - --ca-secret
        - {{ include "kwd.grpcTLS.caSecretName" $root }}
        - --controller-secret
        - {{ include "kwd.grpcTLS.controllerSecretName" $root }}
        - --proxy-secret
        - {{ include "kwd.grpcTLS.proxySecretName" $root }}
        {{- range include "kwd.grpcTLS.controllerDnsNames" $root | fromJsonArray }}
        - --dns-name
        - {{ . }}
        {{- end }}
        - --validity
        - {{ $job.validity | quote }}
        - --ca-validity
        - {{ $job.caValidity | quote }}
        - --renew-before
        - {{ $job.renewBefore | quote }}
      resources:
        requests:
          cpu: 10m
          memory: 16Mi
        limits:
          memory: 64Mi
      securityContext:
        {{- include "kwd.containerSecurityContext" $root | nindent 8 }}
  {{- with $root.Values.controller.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $root.Values.controller.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/*
kwd-proxy serve flags from proxy.config (ingress-nginx's ConfigMap settings as
values): an empty or null setting renders no flag, so the binary's default holds.
*/}}
{{- define "kwd.proxy.configArgs" -}}
{{- $c := .Values.proxy.config }}
{{- $flags := list
  (list "--header-timeout" $c.headerTimeout)
  (list "--idle-timeout" $c.idleTimeout)
  (list "--connect-timeout" $c.connectTimeout)
  (list "--response-timeout" $c.responseTimeout)
  (list "--tls-handshake-timeout" $c.tlsHandshakeTimeout)
  (list "--log-format" $c.logFormat) }}
{{- range $flags }}
{{- $value := index . 1 }}
{{- if $value }}
- {{ index . 0 }}
- {{ $value | toString | quote }}
{{- end }}
{{- end }}
{{- /* Byte counts: YAML numbers reach templates as floats; print them whole. */}}
{{- range list (list "--max-body-size" $c.maxBodySize) (list "--max-header-size" $c.maxHeaderSize) }}
{{- if not (kindIs "invalid" (index . 1)) }}
- {{ index . 0 }}
- {{ index . 1 | int64 | toString | quote }}
{{- end }}
{{- end }}
{{- with $c.trustedProxies }}
- --trusted-proxies
- {{ join "," . | quote }}
{{- end }}
{{- with $c.proxyProtocol }}
- --proxy-protocol
- {{ join "," . | quote }}
{{- end }}
{{- end }}
