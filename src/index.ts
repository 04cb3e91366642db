// Public API of mikro-orm-saga. Every export is listed by name; types with `export type`.

export type { BusinessCalendar } from './calendars/business-calendar.js';
export type { WeekdayCalendarOptions } from './calendars/weekday-calendar.js';
export { WeekdayCalendar } from './calendars/weekday-calendar.js';
export type { DayHours, Weekday, WeeklyHours } from './calendars/working-hours.js';
export { WEEKDAYS } from './calendars/working-hours.js';
export type { WorkingTimeCalendarOptions } from './calendars/working-time-calendar.js';
export { DEFAULT_WORKING_HOURS, WorkingTimeCalendar } from './calendars/working-time-calendar.js';
export type { DeliveryCounts, DispatchPassResult, StagedDelivery, TimerDelivery } from './contracts.js';
export { getCorrelationId, runWithCorrelationId } from './correlation/correlation-context.js';
export { SagaDispatchError } from './dispatcher/dispatch-pass-error.js';
export type { DispatcherEvents } from './dispatcher/dispatcher-events.js';
export type {
  CatchUpPolicy,
  OutboxPublisher,
  ResolvedDispatcherOptions,
  SagaDispatcherOptions,
} from './dispatcher/dispatcher-options.js';
export { CATCH_UP_POLICIES, MAX_DISPATCH_ATTEMPTS } from './dispatcher/dispatcher-options.js';
export type { LeaseRenewal } from './dispatcher/lease-keeper.js';
export type { OutboxEnvelope } from './dispatcher/outbox-envelope.js';
export { SagaDispatcher } from './dispatcher/saga-dispatcher.js';
export type { InboxOutcome, OutboxOutcome, TimerOutcome } from './entities/index.js';
export {
  COLUMN_LIMITS,
  DispatchRecord,
  INBOX_OUTCOMES,
  OUTBOX_OUTCOMES,
  SAGA_ENTITIES,
  SagaHandledMessage,
  SagaInbox,
  SagaOutbox,
  SagaState,
  SagaStateSchema,
  SagaTimer,
  TIMER_OUTCOMES,
} from './entities/index.js';
export type { SagaErrorCode, SagaErrorDetails } from './errors.js';
export {
  SAGA_ERROR_CODES,
  SagaConcurrencyError,
  SagaCorrelationError,
  SagaDefinitionError,
  SagaError,
  SagaPersistenceError,
  SagaSchemaError,
  SagaValidationError,
} from './errors.js';
export { LARGEST_FLOAT, SMALLEST_FLOAT } from './saga/column-value.js';
export { MAX_CORRELATION_BYTES, MAX_TEXT_CORRELATION_LENGTH } from './saga/correlation-value.js';
export type { CorrelationSource, PropertyName, SagaDefinition, SagaDefinitionInput, SagaStep } from './saga/define-saga.js';
export { defineSaga } from './saga/define-saga.js';
export type { HandleOutcome, HandleResult, IgnoreReason } from './saga/handle-result.js';
export { HANDLE_OUTCOMES, IGNORE_REASONS } from './saga/handle-result.js';
export type { PurgeResult } from './saga/handled-messages.js';
export { MAX_PURGE_BATCH_SIZE } from './saga/handled-messages.js';
export { MAX_PAYLOAD_DEPTH } from './saga/json-payload.js';
export type { AnySagaDefinition } from './saga/registered-saga.js';
export type { GroupLimits, HandledEvent, HandleOptions, ResolvedSagaRuntimeOptions, SagaRuntimeOptions } from './saga/runtime-options.js';
export { MAX_PAYLOAD_BYTES_LIMIT } from './saga/runtime-options.js';
export type { AnyMessage, MessageOfType, SagaMessage } from './saga/saga-message.js';
export { SagaRuntime } from './saga/saga-runtime.js';
export { APP_MESSAGE_SAGA_TYPE } from './saga/staging/stage-message.js';
export type { StageDeliveryOptions, StagedRow, StageMessageOptions, StagingTime } from './saga/staging/staging-options.js';
export type { FiringTimer, ScheduleOptions, SendOptions, StepContext } from './saga/step-context.js';
export type { AdviseSagaSchemaOptions, SchemaAdvice } from './schema/advise-saga-schema.js';
export { adviseSagaSchema, RECOMMENDED_AUTOVACUUM_SETTINGS } from './schema/advise-saga-schema.js';
export type { SchemaProblem, SchemaProblemKind, VerifySagaSchemaOptions } from './schema/verify-saga-schema.js';
export { inspectSagaSchema, SCHEMA_FIX, SCHEMA_PROBLEM_KINDS, verifySagaSchema } from './schema/verify-saga-schema.js';
export type { DispatchTable } from './sql/dispatch-tables.js';
export { DISPATCH_TABLES } from './sql/dispatch-tables.js';
export type { LogLevel, SagaLogger } from './telemetry/logger.js';
export { consoleLogger, LOG_LEVELS, silentLogger } from './telemetry/logger.js';
export type { MikroOrmLoggerOptions, PinoLike } from './telemetry/logger-adapters.js';
export { mikroOrmLogger, pinoLogger } from './telemetry/logger-adapters.js';
export { SAGA_GAUGES } from './telemetry/saga-gauges.js';
export type { SagaCounterName, SagaHistogramName, SagaStats } from './telemetry/saga-metrics.js';
export { SAGA_COUNTERS, SAGA_HISTOGRAMS, TELEMETRY_SCOPE } from './telemetry/saga-metrics.js';
export type { Clock } from './time/clock.js';
export { systemClock } from './time/clock.js';
export { EARLIEST_DUE_AT_MS, LATEST_DUE_AT_MS } from './time/due-date-range.js';
export type { Duration } from './time/duration.js';
export { MAX_SPAN_MS, MAX_WAIT_MS } from './time/option-ranges.js';
export type { TimerScope } from './timers/timer-plan.js';
export { TIMER_SCOPES } from './timers/timer-plan.js';
