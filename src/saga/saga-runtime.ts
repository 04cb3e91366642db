import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/core';
import { type Context, context as otelContext, type Tracer, trace } from '@opentelemetry/api';
import type { StagedDelivery, TimerDelivery } from '../contracts.js';
import { getCorrelationId, runWithCorrelationId } from '../correlation/correlation-context.js';
import type { DialectAdapter } from '../dialect/dialect-adapter.js';
import { assertSagaEntitiesRegistered } from '../entities/assert-saga-entities-registered.js';
import { SagaDefinitionError, SagaValidationError } from '../errors.js';
import { verifySagaSchema } from '../schema/verify-saga-schema.js';
import { createDatabaseContext, type DatabaseContext } from '../sql/database-context.js';
import type { GaugedSaga } from '../telemetry/saga-gauges.js';
import { SagaMetrics, type SagaStats, TELEMETRY_SCOPE } from '../telemetry/saga-metrics.js';
import { StepSpan } from '../telemetry/step-span.js';
import { isIntegerIn } from '../time/option-ranges.js';
import { checkAppEntityManager } from './app-entity-manager.js';
import { callOptions } from './call-options.js';
import { copyMessage } from './copy-message.js';
import { correlateMessage } from './correlate-message.js';
import { checkCorrelationId } from './correlation-value.js';
import type { SagaDefinition } from './define-saga.js';
import { DispatcherNotifier } from './dispatcher-notifier.js';
import type { HandleResult } from './handle-result.js';
import { checkMessageId, MAX_PURGE_BATCH_SIZE, type PurgeResult, purgeHandledMessagesBefore } from './handled-messages.js';
import { messageTypeOf } from './message-type-of.js';
import { registerSagas } from './register-saga.js';
import type { AnySagaDefinition, RegisteredSaga } from './registered-saga.js';
import { definitionName } from './registered-saga.js';
import { RowsDue } from './rows-due.js';
import {
  assertEntityManager,
  type HandleOptions,
  type ResolvedSagaRuntimeOptions,
  RUNTIME_DEFAULTS,
  resolveRuntimeOptions,
  type SagaRuntimeOptions,
} from './runtime-options.js';
import type { SagaMessage } from './saga-message.js';
import { stageDelivery } from './staging/stage-delivery.js';
import { stageMessage } from './staging/stage-message.js';
import { stagedUnit } from './staging/staged-unit.js';
import type { StageDeliveryOptions, StagedRow, StageMessageOptions } from './staging/staging-options.js';
import { type StagingRuntime, stagingEntityManager } from './staging/staging-target.js';
import { StartupSchemaCheck } from './startup-schema-check.js';
import { labelOf } from './stored-text.js';
import type { UnitOfWorkRuntime } from './unit-of-work/attempt.js';
import { ormClosedError } from './unit-of-work/classify-failure.js';
import type { HandleTarget } from './unit-of-work/handle-target.js';
import { runJoinedUnitOfWork } from './unit-of-work/joined-unit.js';
import { runUnitOfWork } from './unit-of-work/retry-loop.js';
import type { RuntimeMessage } from './unit-of-work/runtime-message.js';
import { SagaPreload } from './unit-of-work/saga-preload.js';
import { ownPlace } from './unit-of-work/unit-place.js';
import { UnitWriter } from './unit-of-work/unit-writer.js';

/**
 * Handles messages for a set of sagas. Each message is one unit of work per saga instance:
 * load the instance, run the step (outside any transaction), then write the state change, the timer
 * changes and the outbox rows in one transaction guarded by the instance's version. A conflict rolls
 * everything back and re-runs the step on fresh state, a bounded number of times.
 */
export class SagaRuntime {
  /** The defaults of {@link SagaRuntimeOptions}, and of `purgeExpiredMessageIds({ batchSize })`. */
  static readonly defaults = RUNTIME_DEFAULTS;
  readonly options: ResolvedSagaRuntimeOptions;
  /** @internal The database's capabilities (the same as `context.dialect`). */
  readonly dialect: DialectAdapter;
  /** @internal EntityManager, dialect capabilities and library table names, read once and shared with the dispatcher and the statements. */
  readonly context: DatabaseContext;
  private readonly sagas: ReadonlyMap<string, RegisteredSaga>;
  private readonly metrics = new SagaMetrics();
  /** The library's tracer: a proxy that follows the tracer provider registered when a span starts. */
  private readonly tracer: Tracer = trace.getTracer(TELEMETRY_SCOPE);
  /**
   * @internal Units of work that committed rows due at once: the dispatchers on this runtime claim them at once, and
   * on PostgreSQL (`notifyDispatchers`) those of other processes that listen.
   */
  readonly rowsDue: RowsDue;
  /** What its units of work use of it: options, dialect, counters and the writer of their write phases. */
  private readonly unitOfWork: UnitOfWorkRuntime;
  /** What its staging calls use of it. */
  private readonly staging: StagingRuntime;
  /** The start-up schema check, on a pooled connection or in a joined unit's transaction. */
  private readonly schemaCheck: StartupSchemaCheck;

  /**
   * @throws SagaDefinitionError when a saga's state entity is not registered in MikroORM, does not extend
   *   `SagaState`, its correlation property is missing or not unique, two sagas share a name, or an
   *   option is out of range.
   */
  constructor(options: SagaRuntimeOptions) {
    assertEntityManager(options);
    // Before the context reads the library tables' metadata: a missing entity gets the error that names the config keys.
    assertSagaEntitiesRegistered(options.em);
    this.context = createDatabaseContext(options.em);
    this.dialect = this.context.dialect;
    this.options = resolveRuntimeOptions(options, this.dialect.groupsAtOnce);
    this.schemaCheck = new StartupSchemaCheck(this.options);
    const notifies = this.options.notifyDispatchers && this.dialect.notifiesListeners;
    this.rowsDue = new RowsDue(notifies ? new DispatcherNotifier(this.context, this.options.logger) : undefined);
    const writer = new UnitWriter(this.context, this.options.groupCommit);
    this.unitOfWork = {
      options: this.options,
      db: this.context,
      dialect: this.dialect,
      metrics: this.metrics,
      place: ownPlace(this.options.em, writer, this.rowsDue),
    };
    this.staging = { db: this.context, options: this.options, metrics: this.metrics };
    this.sagas = registerSagas(this.options);
  }

  /** Totals of what this runtime did since it was created. */
  stats(): SagaStats {
    return this.metrics.stats();
  }

  /** @internal The registered saga types and their tables' names, for a dispatcher's `saga.active` gauge. */
  gaugedSagas(): GaugedSaga[] {
    return [...this.sagas.values()].map((saga) => ({ sagaType: saga.definition.name, table: this.context.tables.saga(saga.meta) }));
  }

  /** The registered definition named `sagaType`, if any. */
  definition(sagaType: string): AnySagaDefinition | undefined {
    return this.sagas.get(sagaType)?.definition;
  }

  /**
   * Handles `message` for one saga: finds the instance by correlation (creating it for a start message),
   * runs the step, and commits its effects in one transaction. The correlation function and each run of the
   * step get a deep copy of `message` of their own (`copyMessage`): the caller's object is never changed, and a
   * step re-run after a conflict gets the message as it came.
   * @throws SagaDefinitionError `DEFINITION_INVALID` when `definition` is not a saga definition registered on
   *   this runtime.
   * @throws SagaValidationError / SagaCorrelationError for bad input, before anything is written; `OPTION_INVALID`
   *   for options that are not an object (`null`; leave them out instead).
   * @throws SagaConcurrencyError when conflicts outlast `concurrency.maxAttempts`; nothing was written.
   * @throws SagaSchemaError `SCHEMA_INVALID` when a table or column is missing; nothing was written.
   * @throws SagaPersistenceError for any other database failure, the initial read included: `COMMIT_OUTCOME_UNKNOWN`
   *   when the connection failed while COMMIT was in flight (the effects may or may not have been written);
   *   `STORED_VALUE_INVALID` when the saga's row holds a value the runtime cannot read (a timestamp outside years 1
   *   to 9999 such as PostgreSQL's infinity, a version above 2^53 - 1, JSON nested too deep for MikroORM);
   *   `ORM_CLOSED` when `orm.close()` was called before the unit committed (at once, also while it waited for a
   *   connection); `UNIQUE_VIOLATION`, `DATABASE_UNREACHABLE` or `PERSISTENCE_FAILED` otherwise. Nothing was written
   *   but for `COMMIT_OUTCOME_UNKNOWN`.
   * Errors thrown by the step itself propagate unchanged; nothing was written.
   *
   * With `options.em` (your EntityManager inside an open transaction) the unit of work runs inside that transaction,
   * after a savepoint of its own, and is neither grouped nor retried ({@link HandleOptions.em}). Its effects commit
   * with your transaction. What it throws, it throws with its writes rolled back to the savepoint, and:
   * @throws SagaConcurrencyError `CONFLICT_IN_APP_TRANSACTION` at its first conflict: run your transaction again.
   * @throws SagaValidationError `TRANSACTION_REQUIRED` when `options.em` is in no open transaction; `OPTION_INVALID`
   *   when it is not an EntityManager of this runtime's MikroORM instance, or while another call is joined to the same
   *   transaction. Nothing was read or written.
   */
  async handle<TIn extends SagaMessage>(
    // biome-ignore lint/suspicious/noExplicitAny: any state and outgoing types; the message type is what is checked.
    definition: SagaDefinition<any, TIn, any>,
    message: TIn,
    options?: HandleOptions,
  ): Promise<HandleResult> {
    const saga = this.registeredFor(definition);
    const details = { sagaType: saga.definition.name };
    const checked = callOptions(options, 'The options of handle()', details);
    checkAppEntityManager(checked.em, this.context.em, 'handle()', details);
    const copy = copyMessage<SagaMessage>(message, `A message for saga ${saga.definition.name}`, details);
    return this.handleOne(saga, { original: message, copy }, checked);
  }

  /**
   * Handles `message` for every registered saga with a step for its type, one unit of work each,
   * in registration order. Returns one result per saga (none when no saga handles the type). Each saga's
   * correlation function and steps get a copy of the message of their own: what one changes, no other sees.
   * With `options.em` each unit joins your transaction in turn, a savepoint each: when one fails, the units before it
   * stay written in your transaction (roll it back, as after any failure).
   */
  async route<TMessage extends SagaMessage>(message: TMessage, options?: HandleOptions): Promise<HandleResult[]> {
    const checked = callOptions(options, 'The options of route()', {});
    checkAppEntityManager(checked.em, this.context.em, 'route()', {});
    const copy = copyMessage<SagaMessage>(message, 'A routed message', {});
    const type = messageTypeOf(copy, 'A routed message', {});
    const results: HandleResult[] = [];
    for (const saga of this.sagas.values()) {
      if (saga.definition.steps.has(type)) results.push(await this.handleOne(saga, { original: message, copy }, checked));
    }
    return results;
  }

  /**
   * Stages `message` for one saga in the application's own transaction: persists a delivery row (`saga_inbox`) into
   * `em`, which the application's flush inserts with its own writes, so the delivery commits or rolls back with them.
   * The dispatcher then delivers it through an ordinary unit of work (`handle()`'s correlation, message id, retries),
   * and stamps the row in the transaction of the saga's change: a delivery runs its step once in effect, also across
   * crashes. The deliveries of one saga (type and correlation value) run in the order their transactions committed;
   * an earlier one that fails and backs off holds the later ones until it is delivered or dead-lettered.
   *
   * Works inside `em.transactional(async (em) => ...)` (pass that `em`), and with any EntityManager of the runtime's
   * ORM before its `flush()` (the row is written by that flush, in its transaction). Synchronous: it sends nothing to
   * the database. On PostgreSQL the flush takes the saga's advisory lock before the row's INSERT, held until COMMIT: a
   * second transaction staging for the same saga waits for the first to end. The step never gets the EntityManager.
   *
   * ```ts
   * await orm.em.transactional(async (em) => {
   *   em.persist(new Article(articleId, title));
   *   runtime.stageDelivery(em, reviewSaga, { type: 'ArticleSubmitted', articleId });
   * });
   * ```
   * @returns the row's id (its id in the operator API) and when it is due.
   * @throws SagaDefinitionError `DEFINITION_INVALID` when `definition` is not registered on this runtime.
   * @throws SagaValidationError / SagaCorrelationError with the codes `handle()` gives for the same message and options
   *   (`MESSAGE_TYPE_MISSING`, `MESSAGE_TYPE_UNKNOWN`, `CORRELATION_*`, `MESSAGE_ID_INVALID`, `OPTION_INVALID`), and
   *   `PAYLOAD_NOT_SERIALIZABLE` / `PAYLOAD_TOO_LARGE` (a staged message is stored: it must round-trip through JSON
   *   within `maxPayloadBytes`), `TIMER_DELAY_INVALID` / `TIMER_DUE_INVALID` for `delay` / `notBefore`,
   *   `OPTION_INVALID` for an `em` that is not an EntityManager of the runtime's ORM. Nothing is persisted.
   */
  stageDelivery<TIn extends SagaMessage>(
    em: EntityManager,
    // biome-ignore lint/suspicious/noExplicitAny: any state and outgoing types; the message type is what is checked.
    definition: SagaDefinition<any, TIn, any>,
    message: TIn,
    options?: StageDeliveryOptions,
  ): StagedRow {
    const target = stagingEntityManager(this.staging, em, 'stageDelivery()');
    return stageDelivery(this.staging, target, this.registeredFor(definition), message, options);
  }

  /**
   * Stages an outgoing message of the application in its own transaction: persists an outbox row (`saga_outbox`) into
   * `em`, which the application's flush inserts with its own writes. The dispatcher relays it as it relays a saga's
   * messages: at least once, with the row id as the envelope id, dead-lettered after `maxAttempts`, listed by the
   * operator API. Its envelope has `sagaType` {@link APP_MESSAGE_SAGA_TYPE} (`''`); messages with one `orderingKey` are
   * relayed one at a time, as a saga's messages are: within a pass in staging order, which is not commit order (see
   * `StageMessageOptions.orderingKey`). Headers: `correlation-id`, `ordering-key`, and yours.
   * Synchronous: it sends nothing to the database.
   * @returns the row's id (the envelope id consumers deduplicate on) and when it is due.
   * @throws SagaValidationError `MESSAGE_TYPE_MISSING`, `PAYLOAD_NOT_SERIALIZABLE`, `PAYLOAD_TOO_LARGE` (as `ctx.send()`),
   *   `TIMER_DELAY_INVALID` / `TIMER_DUE_INVALID`, `OPTION_INVALID`. Nothing is persisted.
   */
  stageMessage<TMessage extends SagaMessage>(em: EntityManager, message: TMessage, options?: StageMessageOptions): StagedRow {
    return stageMessage(this.staging, stagingEntityManager(this.staging, em, 'stageMessage()'), message, options);
  }

  /**
   * @internal The dispatcher's delivery of a claimed staged delivery (`saga_inbox` row) through an ordinary unit of
   * work: the message's correlation, its message id, conflict retries. The row is stamped in the transaction of the
   * saga's change (`delivered`), or alone when no step runs (`duplicate`, `ignored`), only while `delivery.token` is
   * still its token; otherwise nothing is written and the outcome is `stale`.
   * @throws as `handle()` does; a message its saga no longer takes (no step, no correlation) fails the delivery.
   */
  async deliverStaged(delivery: StagedDelivery, parent?: Context): Promise<HandleResult> {
    const saga = this.registered(delivery.sagaType);
    const { message, target } = stagedUnit(saga, delivery);
    return this.run(saga, message, target, delivery.correlationId ?? randomUUID(), { parent });
  }

  /** {@link SagaRuntime.handle} for a registered saga, from the checks of the message's type and correlation on. */
  private handleOne(saga: RegisteredSaga, message: RuntimeMessage, options: HandleOptions): Promise<HandleResult> {
    const { name } = saga.definition;
    const { type, value, first } = correlateMessage(saga, message);
    // Left out (undefined) is the default; null is refused like any other value that is not a correlation id.
    const given = options.correlationId === undefined ? (getCorrelationId() ?? randomUUID()) : options.correlationId;
    const correlationId = checkCorrelationId(given, name);
    const messageId = options.messageId === undefined ? undefined : checkMessageId(options.messageId, name, type);
    return this.run(saga, { ...message, first }, { kind: 'correlation', value, messageId }, correlationId, { appEm: options.em });
  }

  /**
   * @internal Reads the saga rows of a claimed timer batch ahead, with one query per saga type (not awaited
   * here), for {@link deliverTimer}: each saga's first delivery in the batch takes its row from it.
   */
  preloadTimerSagas(timers: readonly TimerDelivery[]): SagaPreload {
    return SagaPreload.read(this.options.em, (sagaType) => this.sagas.get(sagaType), timers);
  }

  /**
   * @internal The dispatcher's delivery of a claimed timer to its own saga instance. The timer is stamped `fired` in the same
   * transaction as the state change it causes, only while `timer.token` is still its token; otherwise
   * nothing is written and the outcome is `stale`.
   * @param preload the saga rows of the timer's claimed batch ({@link preloadTimerSagas}): the first
   *   attempt takes the saga's row from it when it holds it. Default: none (the row is read).
   * @param parent the context whose span the step's `saga.step` span is a child of (the dispatcher's `saga.timeout`
   *   span). Default: the active context.
   */
  async deliverTimer(timer: TimerDelivery, preload?: SagaPreload, parent?: Context): Promise<HandleResult> {
    const saga = this.registered(timer.sagaType);
    const what = `Timer '${timer.name}' of saga ${timer.sagaType}/${timer.sagaId}`;
    const original = timer.payload as SagaMessage;
    const copy = copyMessage(original, what, { sagaType: timer.sagaType });
    if (messageTypeOf(copy, what, { sagaType: timer.sagaType }) !== timer.messageType || !saga.definition.steps.has(timer.messageType)) {
      throw new SagaValidationError(
        'MESSAGE_TYPE_UNKNOWN',
        `Timer '${timer.name}' of saga ${timer.sagaType}/${timer.sagaId} carries '${timer.messageType}', which the saga has no step for: restore the step or cancel the timer.`,
        { sagaType: timer.sagaType, sagaId: timer.sagaId, timerName: timer.name, messageType: timer.messageType },
      );
    }
    return this.run(saga, { original, copy }, { kind: 'timer', timer, preload }, timer.correlationId ?? randomUUID(), { parent });
  }

  /**
   * Deletes the handled message ids older than `messageIds.retentionMs` (by the runtime's clock), in batches
   * of `batchSize` (default 1,000), each a short statement of its own, until none
   * is left or `maxBatches` (default: no limit) ran. Safe to run from several processes at once.
   */
  async purgeExpiredMessageIds(options: { readonly batchSize?: number; readonly maxBatches?: number } = {}): Promise<PurgeResult> {
    const batchSize = options.batchSize ?? RUNTIME_DEFAULTS.purgeBatchSize;
    const maxBatches = options.maxBatches ?? Number.POSITIVE_INFINITY;
    if (
      !isIntegerIn(batchSize, 1, MAX_PURGE_BATCH_SIZE) ||
      (maxBatches !== Number.POSITIVE_INFINITY && !isIntegerIn(maxBatches, 1, Number.MAX_SAFE_INTEGER))
    ) {
      throw new SagaDefinitionError(
        'OPTION_INVALID',
        `purgeExpiredMessageIds needs an integer batchSize from 1 to ${MAX_PURGE_BATCH_SIZE} and an integer maxBatches >= 1 (or Infinity).`,
      );
    }
    const cutoff = new Date(this.options.clock.now().getTime() - this.options.messageIds.retentionMs);
    return purgeHandledMessagesBefore(this.context, cutoff, batchSize, maxBatches);
  }

  /**
   * Checks the connected database against the library's tables and the registered sagas' tables, now.
   * @throws SagaSchemaError `SCHEMA_INVALID` naming every missing or different table, column and index, and the fix.
   */
  verifySchema(): Promise<void> {
    return verifySagaSchema({ em: this.options.em, sagas: this.options.sagas });
  }

  /** @internal The start-up check ({@link StartupSchemaCheck.once}): once per runtime, again after a mismatch. */
  verifySchemaOnce(): Promise<void> {
    return this.schemaCheck.once();
  }

  private registered(sagaType: string): RegisteredSaga {
    const saga = this.sagas.get(sagaType);
    if (!saga) {
      throw new SagaDefinitionError(
        'DEFINITION_INVALID',
        `Saga ${labelOf(sagaType)} is not registered on this runtime: add its definition to the 'sagas' option.`,
        { sagaType },
      );
    }
    return saga;
  }

  /** The registered saga of `definition`, the first argument of `handle()`, found by its name. */
  private registeredFor(definition: unknown): RegisteredSaga {
    return this.registered(definitionName(definition));
  }

  /**
   * Runs the unit of work of `message`, after the start-up schema check, in its `saga.step` span (a child of
   * `parent`'s span) and under `correlationId` as the ambient correlation id, so that the step and everything it
   * calls read the id the unit of work stamps on its rows: in a transaction of the runtime's own, or inside the
   * application's open transaction of `appEm`.
   */
  private async run(
    saga: RegisteredSaga,
    message: RuntimeMessage,
    target: HandleTarget,
    correlationId: string,
    { appEm, parent = otelContext.active() }: { readonly appEm?: EntityManager; readonly parent?: Context } = {},
  ): Promise<HandleResult> {
    const timer = target.kind === 'timer' ? target.timer : undefined;
    const messageType = String(message.copy.type);
    const span = StepSpan.start(
      this.tracer,
      this.metrics,
      {
        sagaType: saga.definition.name,
        messageType,
        correlationId,
        messageId: timer ? timer.id : target.kind === 'correlation' ? target.messageId : undefined,
        sagaId: timer?.sagaId,
      },
      parent,
    );
    try {
      // Nothing is sent on a closed ORM: MikroORM 6's pool would keep the statement waiting, 7 would connect again.
      if (this.context.orm.closed) throw ormClosedError(saga.definition.name, timer?.sagaId, messageType);
      const input = { saga, message, target, correlationId, span };
      let unit: () => Promise<HandleResult>;
      if (appEm) {
        const checkSchema = (em: EntityManager) => (this.options.verifySchema ? this.schemaCheck.through(em) : Promise.resolve());
        unit = () => runJoinedUnitOfWork(this.unitOfWork, input, { appEm, checkSchema });
      } else {
        if (this.options.verifySchema) await this.schemaCheck.once();
        unit = () => runUnitOfWork(this.unitOfWork, input);
      }
      const work = () => otelContext.with(span.context, unit);
      // Entered only when the ambient id differs (a timer's delivery and a request's own id already run under it).
      const result = await (getCorrelationId() === correlationId ? work() : runWithCorrelationId(correlationId, work));
      span.ended(result);
      return result;
    } catch (error) {
      span.failed(error);
      throw error;
    }
  }
}
