{{- define "rs.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "rs.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "rs.labels" -}}
{{ include "rs.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "rs.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* lintExceptions (values.yaml) as the policy linter's skip annotations, each with its reason. */}}
{{- define "rs.lintExceptions" -}}
{{- $i := 0 }}
{{- range $id, $why := .Values.lintExceptions }}
{{- $i = add1 $i }}
checkov.io/skip{{ $i }}: {{ printf "%s=%s" $id $why | quote }}
{{- end }}
{{- end -}}

{{- define "rs.secretName" -}}
{{ .Values.secrets.existingSecret | default (printf "%s-secrets" (include "rs.fullname" .)) }}
{{- end -}}

{{- define "rs.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ .Values.serviceAccount.name | default (include "rs.fullname" .) }}
{{- else -}}
{{ .Values.serviceAccount.name | default "default" }}
{{- end -}}
{{- end -}}

{{/* The chart makes the Secret only from values given to it (secrets.databaseUrl). */}}
{{- define "rs.makesSecret" -}}
{{- if and (not .Values.secrets.existingSecret) .Values.secrets.databaseUrl }}true{{ end -}}
{{- end -}}

{{- define "rs.sasl" -}}
{{- if hasPrefix "SASL_" .Values.kafka.securityProtocol }}true{{ end -}}
{{- end -}}

{{- define "rs.tls" -}}
{{- if has .Values.kafka.securityProtocol (list "SSL" "SASL_SSL") }}true{{ end -}}
{{- end -}}

{{/* The environment every container of the chart has (worker, migrate, topics): the
     settings are validated as a whole at startup, so the Jobs get the Kafka ones too. */}}
{{- define "rs.env" -}}
- name: APP_ID
  value: {{ .Values.appId | quote }}
- name: TOPIC_PREFIX
  value: {{ .Values.topicPrefix | quote }}
- name: TOPIC_PARTITIONS
  value: {{ .Values.topicPartitions | quote }}
- name: LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
- name: LOG_LEVELS
  value: {{ .Values.logLevels | quote }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "rs.secretName" . }}
      key: DATABASE_URL
- name: DB_MAX_CONNECTIONS_PER_WORKER
  value: {{ .Values.database.maxConnectionsPerWorker | quote }}
- name: OUTBOX_PUBLISH_TIMEOUT_SECONDS
  value: {{ .Values.outbox.publishTimeoutSeconds | quote }}
- name: OUTBOX_IN_DOUBT_TIMEOUT_SECONDS
  value: {{ .Values.outbox.inDoubtTimeoutSeconds | quote }}
- name: RETENTION_BATCH_SIZE
  value: {{ .Values.retention.batchSize | quote }}
- name: RETENTION_BUDGET_SECONDS
  value: {{ .Values.retention.budgetSeconds | quote }}
- name: OUTBOX_RETENTION_HOURS
  value: {{ .Values.retention.outboxHours | quote }}
- name: CALENDAR_EVENT_RETENTION_DAYS
  value: {{ .Values.retention.calendarEventDays | quote }}
- name: CALENDAR_TOMBSTONE_RETENTION_DAYS
  value: {{ .Values.retention.calendarTombstoneDays | quote }}
- name: AUTOMATION_SCHEDULER_RETENTION_DAYS
  value: {{ .Values.retention.automationSchedulerDays | quote }}
- name: TIMER_SLOT_RETENTION_DAYS
  value: {{ .Values.retention.timerSlotDays | quote }}
- name: KAFKA_BOOTSTRAP
  value: {{ .Values.kafka.bootstrap | quote }}
- name: KAFKA_SECURITY_PROTOCOL
  value: {{ .Values.kafka.securityProtocol | quote }}
- name: KAFKA_REPLICATION_FACTOR
  value: {{ .Values.kafka.replicationFactor | quote }}
- name: KAFKA_MIN_INSYNC_REPLICAS
  value: {{ .Values.kafka.minInsyncReplicas | quote }}
- name: KAFKA_DLQ_RETENTION_HOURS
  value: {{ .Values.kafka.dlqRetentionHours | quote }}
- name: KAFKA_DECLARE_INTERNAL_TOPICS
  value: {{ .Values.kafka.declareInternalTopics | quote }}
{{- if include "rs.sasl" . }}
- name: KAFKA_SASL_MECHANISM
  value: {{ .Values.kafka.saslMechanism | quote }}
- name: KAFKA_SASL_USERNAME
  value: {{ required "kafka.saslUsername is required with a SASL_* securityProtocol" .Values.kafka.saslUsername | quote }}
- name: KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "rs.secretName" . }}
      key: KAFKA_SASL_PASSWORD
{{- end }}
{{- if and (include "rs.tls" .) .Values.kafka.caSecret.name }}
- name: KAFKA_SSL_CAFILE
  value: /etc/reminders/kafka-ca/{{ .Values.kafka.caSecret.key }}
{{- end }}
{{- with .Values.kafka.clientCertSecret }}
{{- if and (include "rs.tls" $) .name }}
# Mutual TLS: the client certificate and key the brokers authenticate (the principal).
- name: KAFKA_SSL_CERTFILE
  value: /etc/reminders/kafka-client/{{ .certKey }}
- name: KAFKA_SSL_KEYFILE
  value: /etc/reminders/kafka-client/{{ .keyKey }}
{{- end }}
{{- end }}
{{- with .Values.database.tls }}
{{- if .sslmode }}
# PostgreSQL over TLS: libpq's variables, which asyncpg reads when DATABASE_URL does not say.
- name: PGSSLMODE
  value: {{ .sslmode | quote }}
{{- end }}
{{- if .caSecret.name }}
- name: PGSSLROOTCERT
  value: /etc/reminders/postgres-ca/{{ .caSecret.key }}
{{- end }}
{{- if .clientCertSecret.name }}
- name: PGSSLCERT
  value: /etc/reminders/postgres-client/{{ .clientCertSecret.certKey }}
- name: PGSSLKEY
  value: /etc/reminders/postgres-client/{{ .clientCertSecret.keyKey }}
{{- end }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The certificate Secrets, each mounted read-only where the env above points. */}}
{{- define "rs.certSecrets" -}}
{{- $out := list }}
{{- if and (include "rs.tls" .) .Values.kafka.caSecret.name }}
{{- $out = append $out (dict "volume" "kafka-ca" "secret" .Values.kafka.caSecret.name "keys" (list .Values.kafka.caSecret.key)) }}
{{- end }}
{{- with .Values.kafka.clientCertSecret }}
{{- if and (include "rs.tls" $) .name }}
{{- $out = append $out (dict "volume" "kafka-client" "secret" .name "keys" (list .certKey .keyKey)) }}
{{- end }}
{{- end }}
{{- with .Values.database.tls }}
{{- if .caSecret.name }}
{{- $out = append $out (dict "volume" "postgres-ca" "secret" .caSecret.name "keys" (list .caSecret.key)) }}
{{- end }}
{{- if .clientCertSecret.name }}
{{- $out = append $out (dict "volume" "postgres-client" "secret" .clientCertSecret.name "keys" (list .clientCertSecret.certKey .clientCertSecret.keyKey)) }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end -}}

{{- define "rs.caVolume" -}}
{{- range (include "rs.certSecrets" . | fromJsonArray) }}
- name: {{ .volume }}
  secret:
    secretName: {{ .secret }}
    # Owner root, group fsGroup: readable by the service's user, by no one else.
    defaultMode: 0440
    items:
      {{- range .keys }}
      - key: {{ . }}
        path: {{ . }}
      {{- end }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "rs.caMount" -}}
{{- range (include "rs.certSecrets" . | fromJsonArray) }}
- name: {{ .volume }}
  mountPath: /etc/reminders/{{ .volume }}
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The pods' common spec: their own service account without an API token (the service
     calls no Kubernetes API), pull secrets, placement. */}}
{{- define "rs.podCommon" -}}
serviceAccountName: {{ include "rs.serviceAccountName" . }}
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- include "rs.podSecurityContext" . | nindent 2 }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "rs.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
# The data volume's ownership is fixed once, not walked file by file at every start.
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "rs.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}
