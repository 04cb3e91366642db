// Public API of mikro-orm-saga/operations: the operator API, retention and schema verification.

export type { AdviseSagaSchemaOptions, SchemaAdvice } from '../schema/advise-saga-schema.js';
export { adviseSagaSchema, RECOMMENDED_AUTOVACUUM_SETTINGS } from '../schema/advise-saga-schema.js';
export type { SchemaProblem, SchemaProblemKind, VerifySagaSchemaOptions } from '../schema/verify-saga-schema.js';
export { inspectSagaSchema, SCHEMA_FIX, SCHEMA_PROBLEM_KINDS, verifySagaSchema } from '../schema/verify-saga-schema.js';
export { MAX_IDS_PER_CALL, MAX_PAGE_LIMIT, MAX_REASON_LENGTH } from './operation-input.js';
export type {
  ActiveSagaCount,
  BulkItem,
  BulkResult,
  CancelStatus,
  DispatchRow,
  DispatchRowFields,
  DispatchRowQuery,
  DispatchRowStatus,
  HandledMessageRow,
  InboxRow,
  ItemStatus,
  OutboxRow,
  Page,
  PurgeOptions,
  PurgeReport,
  RequeueStatus,
  RescheduleStatus,
  SagaChange,
  SagaChangeRequest,
  SagaDetail,
  SagaListQuery,
  SagaLookup,
  SagaStatus,
  SagaSummary,
  TimerRow,
} from './operation-types.js';
export { DISPATCH_ROW_STATUSES, ITEM_STATUSES, OPERATOR_MESSAGE_TYPES, SAGA_STATUSES } from './operation-types.js';
export { MAX_PURGE_BATCH_SIZE } from './retention.js';
export type { SagaOperationsOptions } from './saga-operations.js';
export { SagaOperations } from './saga-operations.js';
