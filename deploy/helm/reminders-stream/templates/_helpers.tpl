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
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "rs.secretName" -}}
{{ .Values.secrets.existingSecret | default (printf "%s-secrets" (include "rs.fullname" .)) }}
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
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "rs.caVolume" -}}
{{- if and (include "rs.tls" .) .Values.kafka.caSecret.name }}
- name: kafka-ca
  secret:
    secretName: {{ .Values.kafka.caSecret.name }}
    items:
      - key: {{ .Values.kafka.caSecret.key }}
        path: {{ .Values.kafka.caSecret.key }}
{{- end }}
{{- end -}}

{{- define "rs.caMount" -}}
{{- if and (include "rs.tls" .) .Values.kafka.caSecret.name }}
- name: kafka-ca
  mountPath: /etc/reminders/kafka-ca
  readOnly: true
{{- end }}
{{- end -}}

{{- define "rs.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "rs.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}
