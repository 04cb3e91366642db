import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/core';
import type { BusinessCalendar } from '../calendars/business-calendar.js';
import { getCorrelationId } from '../correlation/correlation-context.js';
import type { DialectAdapter } from '../dialect/dialect-adapter.js';
import { assertSagaEntitiesRegistered } from '../entities/assert-saga-entities-registered.js';
import { COLUMN_LIMITS } from '../entities/dispatch-states.js';
import { SagaState } from '../entities/saga-state.js';
import { SagaConcurrencyError, SagaCorrelationError, SagaDefinitionError, SagaSchemaError, SagaValidationError } from '../errors.js';
import { conflictKind, entityMetadata, freshFork, isScalarProperty } from '../orm/index.js';
import { verifySagaSchema } from '../schema/verify-saga-schema.js';
import { createDatabaseContext, type DatabaseContext } from '../sql/database-context.js';
import { findHandledMessage } from '../sql/handled-message-statements.js';
import { SagaMetrics, type SagaStats } from '../telemetry/saga-metrics.js';
import { type Clock, ENDED, systemClock } from '../time/clock.js';
import { isIntegerIn, isNumberIn, MAX_SPAN_MS, MAX_WAIT_MS, shownOption } from '../time/option-ranges.js';
import { callOptions } from './call-options.js';
import { copyMessage } from './copy-message.js';
import { checkCorrelationId, correlationCheckFor } from './correlation-value.js';
import { definitionProblem, type SagaDefinition, type SagaMessage } from './define-saga.js';
import { HANDLE_OUTCOMES, type HandleResult, IGNORE_REASONS } from './handle-result.js';
import {
  checkMessageId,
  DEFAULT_MESSAGE_ID_RETENTION_MS,
  DEFAULT_PURGE_BATCH_SIZE,
  MAX_PURGE_BATCH_SIZE,
  type PurgeResult,
  purgeHandledMessagesBefore,
} from './handled-messages.js';
import { messageTypeOf } from './message-type-of.js';
import { type AnySagaDefinition, type HandleTarget, type RegisteredSaga, readStep } from './registered-saga.js';
import { stateValuesCheckFor } from './state-values.js';
import { kindOf, labelOf, nameProblem } from './stored-text.js';
import { classifyFailure, type FailureContext, RetryableConflict } from './unit-of-work/classify-failure.js';
import {
  DEFAULT_GROUP_LOCK_TIMEOUT_MS,
  DEFAULT_GROUP_MAX_GROUPS,
  DEFAULT_GROUP_MAX_UNITS,
  GroupCommit,
  type GroupLimits,
  LeftGroup,
  type UnitWrite,
} from './unit-of-work/group-commit.js';
import { type IgnoredMessage, loadInstance } from './unit-of-work/load-instance.js';
import { planTimerRetirement, planWrites } from './unit-of-work/plan-writes.js';
import { runStep, sealState } from './unit-of-work/run-step.js';
import { SagaPreload } from './unit-of-work/saga-preload.js';
import type { UnitOfWorkPlan } from './unit-of-work/unit-of-work-plan.js';
import { runNamed, StaleTimer } from './unit-of-work/write-failures.js';
import { type WriteReport, writePlan } from './unit-of-work/write-plan.js';

/** Default of `concurrency.maxAttempts`: units of work tried per message before a `SagaConcurrencyError`. */
export const DEFAULT_MAX_ATTEMPTS = 10;
/** Default of `concurrency.baseDelayMs`: the first retry waits up to this long (full jitter), doubling after. */
export const DEFAULT_RETRY_BASE_DELAY_MS = 5;
/** Default of `concurrency.maxDelayMs`: cap of the wait between two retries, in milliseconds. */
export const DEFAULT_RETRY_MAX_DELAY_MS = 250;
/** Default of `maxPayloadBytes`: largest JSON text of one timer message, or of one outbox message with its headers, in UTF-8 bytes. */
export const DEFAULT_MAX_PAYLOAD_BYTES = 65_536;
/** Largest `maxPayloadBytes` the runtime takes: 268,435,455 bytes, the largest `jsonb` value PostgreSQL stores. */
export const MAX_PAYLOAD_BYTES_LIMIT = 268_435_455;

/** Default of `verifySchema`: the schema is checked before the first unit of work. */
export const DEFAULT_VERIFY_SCHEMA = true;

/** What the last of a run of conflicts was, for the message of a {@link SagaConcurrencyError}. */
const LAST_CONFLICT = {
  version: 'other units of work kept committing first',
  deadlock: 'the last: a deadlock with another transaction',
  'lock wait': {
    sqlite: 'the last: the database stayed locked by another connection past its busy timeout',
    postgresql: 'the last: a row stayed locked by another transaction past the lock timeout',
  },
} as const;

/** What the message of a {@link SagaConcurrencyError} suggests raising, besides `concurrency.maxAttempts`, per last conflict. */
const RAISE_TOO = {
  sqlite: " or the connection's busy timeout (docs/timers.md)",
  postgresql: ', or end the transaction that holds the row (docs/guarantees.md, "Group commit")',
} as const;

/** Options of {@link SagaRuntime}. */
export interface SagaRuntimeOptions {
  /** The application's EntityManager (usually `orm.em`); every unit of work runs in a fork of it. */
  readonly em: EntityManager;
  /** The sagas this runtime handles. Their state entities must be registered in MikroORM. */
  readonly sagas: readonly AnySagaDefinition[];
  /** Source of the current time. Default: the system clock. Tests pass a `FakeClock`. */
  readonly clock?: Clock;
  /** Business calendars by key, for `ctx.schedule(..., { calendar })`. Default: none. */
  readonly calendars?: Readonly<Record<string, BusinessCalendar>>;
  /** Optimistic-concurrency retries. */
  readonly concurrency?: {
    /** Units of work tried per message, the first included, 1 to 2^53 - 1. Default {@link DEFAULT_MAX_ATTEMPTS} (10). */
    readonly maxAttempts?: number;
    /** Upper bound of the first retry's random wait, ms, 0 to {@link MAX_WAIT_MS}. Default {@link DEFAULT_RETRY_BASE_DELAY_MS} (5). */
    readonly baseDelayMs?: number;
    /** Cap of any retry's random wait, ms, 0 to {@link MAX_WAIT_MS}. Default {@link DEFAULT_RETRY_MAX_DELAY_MS} (250). */
    readonly maxDelayMs?: number;
  };
  /**
   * Largest JSON text of a timer message, or of a sent message and its headers together, in UTF-8 bytes.
   * 1 to {@link MAX_PAYLOAD_BYTES_LIMIT}. Default {@link DEFAULT_MAX_PAYLOAD_BYTES} (64 KiB).
   */
  readonly maxPayloadBytes?: number;
  /**
   * Called after each message (including each timer delivery) was handled, with its result: for tracing and
   * audit logs. It runs after the commit; what it throws is ignored. Default: none.
   */
  readonly onHandled?: (event: HandledEvent) => void;
  /** Idempotent handling by message id (`handle(..., { messageId })`). */
  readonly messageIds?: {
    /**
     * How long a handled message id is remembered, ms: a redelivery within it is a `duplicate`, one after it
     * (and after {@link SagaRuntime.purgeExpiredMessageIds} ran) is handled anew. Make it longer than your
     * broker's redelivery horizon. 0 to {@link MAX_SPAN_MS} (100 years). Default {@link DEFAULT_MESSAGE_ID_RETENTION_MS} (7 days).
     */
    readonly retentionMs?: number;
  };
  /**
   * Check the database schema (library tables, columns, indexes, each saga table's base columns and active-row
   * index; `verifySagaSchema`) once, before the first unit of work: a mismatch is a `SagaSchemaError` naming every
   * difference, instead of a failure halfway through a message. One catalog read. Default
   * {@link DEFAULT_VERIFY_SCHEMA} (true).
   */
  readonly verifySchema?: boolean;
  /**
   * Group commit: the write phases of units of work that are ready while earlier ones are being written are
   * written together, in one transaction with a savepoint per unit (each unit still commits or fails alone;
   * docs/guarantees.md). A unit that finds a group slot free is written at once. `false`: every unit of work
   * in its own transaction. Default: on, with {@link DEFAULT_GROUP_MAX_UNITS} and {@link DEFAULT_GROUP_MAX_GROUPS} (1 on SQLite).
   */
  readonly groupCommit?:
    | false
    | {
        /** Most units of work in one group transaction. Default {@link DEFAULT_GROUP_MAX_UNITS} (32). */
        readonly maxUnits?: number;
        /**
         * Most group transactions written at once (each holds one connection). Default {@link DEFAULT_GROUP_MAX_GROUPS}
         * (2) on PostgreSQL, 1 on SQLite (one writer at a time: a second group would only wait for the first).
         */
        readonly maxGroups?: number;
        /**
         * PostgreSQL: how long a group transaction waits for a row lock another transaction holds. A unit that
         * waits longer leaves its group (rolled back to its savepoint, not charged an attempt) and runs again in
         * a transaction of its own, which waits as the connection's settings allow; the group goes on. A shorter
         * `lock_timeout` of the connection is kept. Default {@link DEFAULT_GROUP_LOCK_TIMEOUT_MS} (250).
         */
        readonly lockTimeoutMs?: number;
      };
}

/** What {@link SagaRuntimeOptions.onHandled} receives. */
export interface HandledEvent {
  /** The message as the caller passed it (a timer's payload as read): no step changed it. */
  readonly message: SagaMessage;
  readonly result: HandleResult;
  /** The timer that delivered the message, if one did. */
  readonly timer: TimerDelivery | undefined;
}

/** {@link SagaRuntimeOptions} with every default applied. */
export interface ResolvedSagaRuntimeOptions {
  readonly em: EntityManager;
  readonly sagas: readonly AnySagaDefinition[];
  readonly clock: Clock;
  readonly calendars: ReadonlyMap<string, BusinessCalendar>;
  readonly concurrency: { readonly maxAttempts: number; readonly baseDelayMs: number; readonly maxDelayMs: number };
  readonly maxPayloadBytes: number;
  readonly onHandled: ((event: HandledEvent) => void) | undefined;
  readonly messageIds: { readonly retentionMs: number };
  readonly verifySchema: boolean;
  /** False when every unit of work writes in its own transaction. */
  readonly groupCommit: GroupLimits | false;
}

/** Options of one `handle` call. */
export interface HandleOptions {
  /** Correlation id to handle the message under. Default (left out or undefined): the ambient one, else a new uuid. */
  readonly correlationId?: string;
  /**
   * The message's id (a broker's message id, an HTTP idempotency key): recorded with the unit of work, so the
   * same id delivered again to the same saga instance writes nothing and answers `duplicate`. 1 to 200
   * characters. Default: none (every delivery is handled).
   */
  readonly messageId?: string;
}

/** A claimed timer handed to the runtime for delivery (by the dispatcher, or a test). */
export interface TimerDelivery {
  readonly id: string;
  readonly token: string;
  readonly sagaType: string;
  readonly sagaId: string;
  readonly name: string;
  readonly messageType: string;
  readonly payload: unknown;
  readonly dueAt: Date;
  readonly attempts: number;
  readonly correlationId: string | null;
  /** The last failure recorded on the timer, if any. */
  readonly lastError?: string | null;
}

/**
 * Handles messages for a set of sagas. Each message is one unit of work per saga instance:
 * load the instance, run the step (outside any transaction), then write the state change, the timer
 * changes and the outbox rows in one transaction guarded by the instance's version. A conflict rolls
 * everything back and re-runs the step on fresh state, a bounded number of times.
 */
export class SagaRuntime {
  readonly options: ResolvedSagaRuntimeOptions;
  /** The database's capabilities (the same as `context.dialect`). */
  readonly dialect: DialectAdapter;
  /** @internal EntityManager, dialect capabilities and library table names, read once and shared with the dispatcher and the statements. */
  readonly context: DatabaseContext;
  private readonly sagas = new Map<string, RegisteredSaga>();
  private readonly metrics = new SagaMetrics();
  private schemaChecked: Promise<void> | undefined;
  private readonly groups: GroupCommit | undefined;

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
    this.groups = this.options.groupCommit ? new GroupCommit(this.context, this.options.groupCommit) : undefined;
    for (const [index, definition] of this.options.sagas.entries()) {
      const problem = definitionProblem(definition);
      if (problem) {
        throw new SagaDefinitionError('DEFINITION_INVALID', `sagas[${index}] ${problem}: pass the definitions defineSaga() returned.`);
      }
      if (this.sagas.has(definition.name)) {
        throw new SagaDefinitionError('DEFINITION_INVALID', `Two sagas are named '${definition.name}': saga names must be unique.`, {
          sagaType: definition.name,
        });
      }
      this.sagas.set(definition.name, this.register(definition));
    }
  }

  /** Totals of what this runtime did since it was created. */
  stats(): SagaStats {
    return this.metrics.stats();
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
   *   `UNIQUE_VIOLATION`, `DATABASE_UNREACHABLE` or `PERSISTENCE_FAILED` otherwise. Nothing was written but for
   *   `COMMIT_OUTCOME_UNKNOWN`.
   * Errors thrown by the step itself propagate unchanged; nothing was written.
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
    const copy = copyMessage<SagaMessage>(message, `A message for saga ${saga.definition.name}`, details);
    return this.handleOne(saga, { original: message, copy }, checked);
  }

  /**
   * Handles `message` for every registered saga with a step for its type, one unit of work each,
   * in registration order. Returns one result per saga (none when no saga handles the type). Each saga's
   * correlation function and steps get a copy of the message of their own: what one changes, no other sees.
   */
  async route<TMessage extends SagaMessage>(message: TMessage, options?: HandleOptions): Promise<HandleResult[]> {
    const checked = callOptions(options, 'The options of route()', {});
    const copy = copyMessage<SagaMessage>(message, 'A routed message', {});
    const type = messageTypeOf(copy, 'A routed message', {});
    const results: HandleResult[] = [];
    for (const saga of this.sagas.values()) {
      if (saga.definition.steps.has(type)) results.push(await this.handleOne(saga, { original: message, copy }, checked));
    }
    return results;
  }

  /** {@link handle} for a registered saga, from the checks of the message's type and correlation on. */
  private handleOne(saga: RegisteredSaga, message: RuntimeMessage, options: HandleOptions): Promise<HandleResult> {
    const { name } = saga.definition;
    const type = messageTypeOf(message.copy, `A message for saga ${name}`, { sagaType: name });
    if (!saga.definition.steps.has(type)) {
      throw new SagaValidationError(
        'MESSAGE_TYPE_UNKNOWN',
        `Saga ${name} has no step for message type ${labelOf(type)}: add a step for it, or do not send it this message.`,
        { sagaType: name, messageType: labelOf(type) },
      );
    }
    // The correlation function is the saga's own code: it reads a copy, the one the step's first run then gets.
    const first = this.stepCopy(saga, message);
    const correlation = saga.definition.correlate(first);
    if (!correlation.defined) {
      throw new SagaCorrelationError(
        'CORRELATION_UNDEFINED',
        `Saga ${name} does not say how '${type}' finds its instance: add correlation.from.${type}.`,
        { sagaType: name, messageType: type },
      );
    }
    if (correlation.value === undefined || correlation.value === null || correlation.value === '') {
      throw new SagaCorrelationError(
        'CORRELATION_MISSING',
        `Message '${type}' carries no value for ${name}.${saga.definition.correlationProperty}: set the correlation field on the message before handling it.`,
        { sagaType: name, messageType: type },
      );
    }
    const value = saga.checkCorrelation(correlation.value, type);
    // Left out (undefined) is the default; null is refused like any other value that is not a correlation id.
    const given = options.correlationId === undefined ? (getCorrelationId() ?? randomUUID()) : options.correlationId;
    const correlationId = checkCorrelationId(given, name);
    const messageId = options.messageId === undefined ? undefined : checkMessageId(options.messageId, name, type);
    return this.run(saga, { ...message, first }, { kind: 'correlation', value, messageId }, correlationId);
  }

  /** A copy of the message for one run of the saga's own code (its correlation function or a step). */
  private stepCopy(saga: RegisteredSaga, message: RuntimeMessage): SagaMessage {
    return copyMessage(message.copy, `A message for saga ${saga.definition.name}`, { sagaType: saga.definition.name });
  }

  /**
   * @internal Reads the saga rows of a claimed timer batch ahead, with one query per saga type (not awaited
   * here), for {@link deliverTimer}: each saga's first delivery in the batch takes its row from it.
   */
  preloadTimerSagas(timers: readonly TimerDelivery[]): SagaPreload {
    return SagaPreload.read(this.options.em, (sagaType) => this.sagas.get(sagaType), timers);
  }

  /**
   * Delivers a claimed timer to its own saga instance. The timer is stamped `fired` in the same
   * transaction as the state change it causes, only while `timer.token` is still its token; otherwise
   * nothing is written and the outcome is `stale`.
   * @param preload @internal the saga rows of the timer's claimed batch ({@link preloadTimerSagas}): the first
   *   attempt takes the saga's row from it when it holds it. Default: none (the row is read).
   */
  async deliverTimer(timer: TimerDelivery, preload?: SagaPreload): Promise<HandleResult> {
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
    return this.run(saga, { original, copy }, { kind: 'timer', timer, preload }, timer.correlationId ?? randomUUID());
  }

  /**
   * Deletes the handled message ids older than `messageIds.retentionMs` (by the runtime's clock), in batches
   * of `batchSize` (default {@link DEFAULT_PURGE_BATCH_SIZE}), each a short statement of its own, until none
   * is left or `maxBatches` (default: no limit) ran. Safe to run from several processes at once.
   */
  async purgeExpiredMessageIds(options: { readonly batchSize?: number; readonly maxBatches?: number } = {}): Promise<PurgeResult> {
    const batchSize = options.batchSize ?? DEFAULT_PURGE_BATCH_SIZE;
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

  /**
   * @internal The start-up check: {@link verifySchema} once per runtime (again after a mismatch). A check that
   * fails for another reason (the database is away) is not held against the schema: the caller's own
   * statements report that failure, and the check runs again next time.
   */
  async verifySchemaOnce(): Promise<void> {
    this.schemaChecked ??= this.verifySchema();
    try {
      await this.schemaChecked;
    } catch (error) {
      this.schemaChecked = undefined;
      if (error instanceof SagaSchemaError) throw error;
    }
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
    const name: unknown = definition !== null && typeof definition === 'object' ? (definition as { name?: unknown }).name : undefined;
    if (typeof name !== 'string') {
      throw new SagaDefinitionError(
        'DEFINITION_INVALID',
        `handle() was given ${kindOf(definition)} instead of a saga definition: pass the definition defineSaga() returned, registered in the 'sagas' option.`,
      );
    }
    return this.registered(name);
  }

  private register(definition: AnySagaDefinition): RegisteredSaga {
    const fail = (message: string): never => {
      throw new SagaDefinitionError('DEFINITION_INVALID', message, { sagaType: definition.name });
    };
    const className = definition.state?.name ?? String(definition.state);
    const meta = entityMetadata(this.options.em, definition.state);
    if (!meta) {
      fail(`Saga ${definition.name}: entity ${className} is not registered in MikroORM: add it to the 'entities' of your ORM config.`);
    }
    if (!(definition.state.prototype instanceof SagaState)) {
      fail(`Saga ${definition.name}: entity ${className} must extend SagaState from mikro-orm-saga.`);
    }
    const property = meta!.properties[definition.correlationProperty];
    if (!property) fail(`Saga ${definition.name}: ${className} has no property '${definition.correlationProperty}' to correlate on.`);
    const unique =
      property!.primary ||
      property!.unique === true ||
      typeof property!.unique === 'string' ||
      meta!.uniques.some((u) => [u.properties].flat().length === 1 && [u.properties].flat()[0] === property!.name);
    if (!unique) {
      fail(
        `Saga ${definition.name}: correlation property ${className}.${property!.name} is not unique, so two start messages could create two instances: declare it with @Property({ unique: true }).`,
      );
    }
    if (definition.stepProperty !== undefined) {
      const step = meta!.properties[definition.stepProperty];
      if (!step) fail(`Saga ${definition.name}: ${className} has no property '${definition.stepProperty}' (stepProperty).`);
      // Timers record the step as text and compare it with the stored step: only a string compares truthfully.
      if (step!.runtimeType !== 'string' || !isScalarProperty(step!)) {
        fail(
          `Saga ${definition.name}: stepProperty ${className}.${definition.stepProperty} must be a string property (it is ${step!.runtimeType ?? step!.kind}): declare it with @Property({ type: 'string' }) or name another property.`,
        );
      }
    }
    return {
      definition,
      meta: meta!,
      checkCorrelation: correlationCheckFor(definition.name, property!),
      checkStateValues: stateValuesCheckFor(meta!),
      settings: {
        calendars: this.options.calendars,
        maxPayloadBytes: this.options.maxPayloadBytes,
        knownMessageTypes: new Set(definition.steps.keys()),
        stepScopedByDefault: definition.stepProperty !== undefined,
      },
    };
  }

  private async run(saga: RegisteredSaga, message: RuntimeMessage, target: HandleTarget, correlationId: string): Promise<HandleResult> {
    const { maxAttempts } = this.options.concurrency;
    if (this.options.verifySchema) await this.verifySchemaOnce();
    // Every run of the step gets a copy of its own: a step that changed its message and met a conflict runs
    // again on the message as it came, not as it left it.
    let first = message.first;
    const stepMessage = () => {
      const copy = first ?? this.stepCopy(saga, message);
      first = undefined;
      return copy;
    };
    let conflicts = 0;
    /** Whether the unit of work writes in a transaction of its own: once it left a group for a held row. */
    let alone = false;
    /** How many times it left its group or took a turn in a row: paces its turns. */
    let turns = 0;
    for (let attempt = 1; ; attempt++) {
      try {
        const result = await this.attempt(saga, message.copy, stepMessage, target, correlationId, { attempts: attempt, conflicts, alone });
        this.count(result, target.kind === 'timer');
        try {
          this.options.onHandled?.({ message: message.original, result, timer: target.kind === 'timer' ? target.timer : undefined });
        } catch {
          // A tracing hook must not turn a committed unit of work into a failure.
        }
        return result;
      } catch (error) {
        if (error instanceof LeftGroup) {
          // Nothing of it was written and no other unit of work committed first: not an attempt, not a conflict.
          // Alone already: every solo slot was taken and its row was still held past its turn. It pauses before it
          // reads and tries again, on the runtime's clock (the row may stay held for as long as another
          // transaction lasts; a FakeClock's advance() ends the pause).
          if (alone) await pauseBeforeTurn(this.options.clock, turnPause(++turns, this.options.concurrency));
          alone = true;
          attempt--;
          continue;
        }
        if (!(error instanceof RetryableConflict)) throw error;
        conflicts++;
        this.metrics.add('concurrencyConflicts', saga.definition.name);
        if (attempt >= maxAttempts) {
          throw new SagaConcurrencyError(
            'CONCURRENCY_CONFLICT',
            `Saga ${saga.definition.name}${error.sagaId ? `/${error.sagaId}` : ''}: message '${message.copy.type}' met ${conflicts} concurrency conflicts in a row (${lastConflict(error.cause, this.dialect)}); nothing of it was written. Retry the message later, or raise concurrency.maxAttempts${conflictKind(error.cause) === 'lock wait' ? RAISE_TOO[this.dialect.name] : ''}.`,
            { sagaType: saga.definition.name, sagaId: error.sagaId, messageType: message.copy.type, attempts: attempt },
            { cause: error.cause },
          );
        }
        await sleepWithJitter(attempt, this.options.concurrency);
      }
    }
  }

  /**
   * One unit of work: load or ignore, run the step, plan the writes, write them in one transaction. `message` is
   * the runtime's copy (read, never handed out); the step runs on `stepMessage()`.
   */
  private async attempt(
    saga: RegisteredSaga,
    message: SagaMessage,
    stepMessage: () => SagaMessage,
    target: HandleTarget,
    correlationId: string,
    { attempts, conflicts, alone }: { readonly attempts: number; readonly conflicts: number; readonly alone: boolean },
  ): Promise<HandleResult> {
    const { definition, meta } = saga;
    const write = (unit: UnitWrite) => (alone && this.groups ? this.groups.writeAlone(unit) : this.write(unit));
    const em = freshFork(this.options.em);
    const now = this.options.clock.now();
    const timer = target.kind === 'timer' ? target.timer : undefined;
    const base = { sagaType: definition.name, messageType: message.type, attempts, conflicts };
    const failed = (context: Pick<FailureContext, 'sagaId' | 'startedWith' | 'timerNames'>) => async (error: unknown) => {
      if (error instanceof LeftGroup) throw error;
      throw await classifyFailure(error, { em: this.options.em, db: this.context, saga, messageType: message.type, ...context });
    };

    // Only the first attempt may use a row read ahead: a retry follows a conflict, so it reads the row afresh.
    const preloaded = target.kind === 'timer' && attempts === 1 ? target.preload?.take(definition.name, target.timer.sagaId) : undefined;
    const instance = await runNamed('read', meta.tableName, async () =>
      loadInstance(em, saga, message, target, now, await preloaded),
    ).catch(failed({ sagaId: timer?.sagaId, startedWith: undefined, timerNames: [] }));
    const messageId = target.kind === 'correlation' ? target.messageId : undefined;
    // Looked up before the ignore decision: the redelivery of the message that completed the saga is a duplicate.
    const existing = instance.kind === 'ignored' ? instance.state : instance.isNew ? null : instance.state;
    if (messageId !== undefined && existing) {
      const handled = await runNamed('read', this.context.tables.handledMessage.name, () =>
        findHandledMessage(this.context, em, definition.name, existing.id, messageId),
      ).catch(failed({ sagaId: existing.id, startedWith: undefined, timerNames: [] }));
      if (handled) return { ...this.result(HANDLE_OUTCOMES.DUPLICATE, base, existing, saga, NO_EFFECTS), version: handled.version };
    }
    if (instance.kind === 'ignored') {
      // A timer for a saga that is gone or completed leaves the pending set, so it is not delivered again.
      if (timer) {
        const retirement = write({
          em,
          plan: planTimerRetirement(timer, message.type, now),
          target: { state: undefined, meta },
          lockKey: existingRowKey(definition.name, timer.sagaId),
        });
        await retirement.catch(ignoreStale).catch(failed({ sagaId: timer.sagaId, startedWith: undefined, timerNames: [] }));
      }
      return this.ignored(base, saga, instance, timer);
    }
    const firing = timer && { id: timer.id, name: timer.name, dueAt: timer.dueAt, attempts: timer.attempts };
    const run = await runStep(em, saga, instance, message.type, stepMessage(), { now, correlationId, timer: firing });
    const plan = planWrites({
      sagaType: definition.name,
      hasStepProperty: definition.stepProperty !== undefined,
      instance,
      run,
      message,
      timer,
      now,
      correlationId,
      messageId,
    });
    const { state } = instance;
    const verifyUnchanged = sealState(em, definition.name, state);
    if (!plan) return this.result(HANDLE_OUTCOMES.HANDLED, base, state, saga, { ...NO_EFFECTS, completed: run.completed });
    let report: WriteReport;
    try {
      report = await write({ em, plan, target: { state, meta, verifyUnchanged }, lockKey: lockKeyOf(plan, definition.name, target) });
    } catch (error) {
      if (!(error instanceof StaleTimer)) {
        const startedWith = instance.isNew && target.kind === 'correlation' ? { value: target.value } : undefined;
        return failed({ sagaId: state.id, startedWith, timerNames: plan.timers.map((t) => t.name) })(error);
      }
      const { version, step } = instance.before;
      return { ...base, ...NO_EFFECTS, outcome: HANDLE_OUTCOMES.STALE, sagaId: state.id, version, step };
    }
    // Counted here, where it is known that this unit of work completed the saga (a late message handled on a
    // completed saga changes it too, and must not count it again).
    if (run.completed && !instance.before.completed) this.metrics.add('completed', definition.name);
    return this.result(instance.isNew ? HANDLE_OUTCOMES.STARTED : HANDLE_OUTCOMES.HANDLED, base, state, saga, {
      changed: run.changed,
      completed: run.completed,
      timersScheduled: plan.timers.length,
      timersCancelled: report.timersCancelled,
      messagesSent: plan.outbox.length,
    });
  }

  /** The write phase of one unit of work: in the next group, or in a transaction of its own when grouping is off. */
  private write(unit: UnitWrite): Promise<WriteReport> {
    return this.groups ? this.groups.write(unit) : writePlan(this.context, unit.em, unit.plan, unit.target);
  }

  private ignored(base: ResultBase, saga: RegisteredSaga, instance: IgnoredMessage, timer: TimerDelivery | undefined): HandleResult {
    const { reason, state } = instance;
    if (state) return { ...this.result(HANDLE_OUTCOMES.IGNORED, base, state, saga, { ...NO_EFFECTS, completed: true }), reason };
    return { ...base, ...NO_EFFECTS, outcome: HANDLE_OUTCOMES.IGNORED, reason, sagaId: timer?.sagaId ?? null, version: null, step: null };
  }

  private result(
    outcome: HandleResult['outcome'],
    base: ResultBase,
    state: SagaState,
    saga: RegisteredSaga,
    effects: Pick<HandleResult, 'changed' | 'completed' | 'timersScheduled' | 'timersCancelled' | 'messagesSent'>,
  ): HandleResult {
    return { ...base, ...effects, outcome, sagaId: state.id, version: state.version, step: readStep(state, saga.definition.stepProperty) };
  }

  private count(result: HandleResult, timerDelivery: boolean): void {
    const type = result.sagaType;
    if (timerDelivery && result.outcome === HANDLE_OUTCOMES.IGNORED) this.metrics.add('timersDiscarded', type);
    if (result.outcome === HANDLE_OUTCOMES.STARTED) this.metrics.add('started', type);
    if (result.outcome === HANDLE_OUTCOMES.HANDLED) this.metrics.add('handled', type);
    if (result.reason === IGNORE_REASONS.NO_INSTANCE) this.metrics.add('ignoredNoInstance', type);
    if (result.reason === IGNORE_REASONS.COMPLETED) this.metrics.add('ignoredCompleted', type);
    if (result.outcome === HANDLE_OUTCOMES.STALE) this.metrics.add('timersStale', type);
    if (result.outcome === HANDLE_OUTCOMES.DUPLICATE) this.metrics.add('duplicates', type);
    this.metrics.add('timersScheduled', type, result.timersScheduled);
    this.metrics.add('timersCancelled', type, result.timersCancelled);
    this.metrics.add('messagesSent', type, result.messagesSent);
  }
}

/** A message as the runtime holds it while it handles it. */
interface RuntimeMessage {
  /** The caller's object (a timer's payload): handed back to the caller's own hook (`onHandled`), never to a step. */
  readonly original: SagaMessage;
  /** The runtime's copy: its type is read and recorded from it; no saga code gets it. */
  readonly copy: SagaMessage;
  /** The copy the correlation function read: the step's first run gets it, later runs a new copy each. */
  readonly first?: SagaMessage | undefined;
}

/** The fields of a result every outcome shares. */
type ResultBase = Pick<HandleResult, 'sagaType' | 'messageType' | 'attempts' | 'conflicts'>;

/** What a unit of work that wrote nothing did. */
const NO_EFFECTS = { changed: false, completed: false, timersScheduled: 0, timersCancelled: 0, messagesSent: 0 } as const;

/**
 * Where a unit of work takes its first lock, as a group orders its units: a new instance takes the unique key of
 * its correlation value (its id is new, so it is ordered by that value), an existing one its row. New instances
 * come first, so a group never waits for a start's key while it holds an existing row another group needs.
 * Existing instances are ordered by saga type and id, the order in which the dispatcher's multi-row statements
 * on PostgreSQL (lease renewal, start marks, catch-up) lock timer rows, so a group and such a statement never
 * wait for each other in a cycle.
 */
function lockKeyOf(plan: UnitOfWorkPlan, sagaType: string, target: HandleTarget): readonly string[] {
  if (plan.sagaRow.kind === 'insert' && target.kind === 'correlation') return ['0', sagaType, String(target.value)];
  return existingRowKey(sagaType, plan.sagaId);
}

function existingRowKey(sagaType: string, sagaId: string): readonly string[] {
  return ['1', sagaType, sagaId];
}

/** A timer retired because its saga is gone or completed: a lost claim means another unit of work already did. */
function ignoreStale(error: unknown): void {
  if (!(error instanceof StaleTimer)) throw error;
}

function sleepWithJitter(attempt: number, options: ResolvedSagaRuntimeOptions['concurrency']): Promise<void> {
  // Full jitter: a random wait below an exponentially growing cap spreads competing retries apart.
  // These few milliseconds only de-synchronise competitors; they are not business time, so they use real timers.
  const cap = Math.min(options.maxDelayMs, options.baseDelayMs * 2 ** (attempt - 1));
  const ms = Math.random() * cap;
  return ms < 1 ? Promise.resolve() : new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * The pause before a unit of work whose row stayed held takes another turn: between half and all of the retry
 * delay cap of its `turns`-th turn (never 0 unless `baseDelayMs` is), so turns stay spread out however many wait.
 */
function turnPause(turns: number, options: ResolvedSagaRuntimeOptions['concurrency']): number {
  const cap = Math.min(options.maxDelayMs, options.baseDelayMs * 2 ** Math.min(turns - 1, 30));
  return Math.round(cap / 2 + (Math.random() * cap) / 2);
}

/**
 * Pauses `ms` before a unit's next turn: on `clock` (a FakeClock's advance() ends it early) and never longer
 * than `ms` of real time. On a FakeClock alone, a unit of a released row would wait until the test happened
 * to advance the clock: runtime.handle() would never return, nothing showing why.
 */
function pauseBeforeTurn(clock: Clock, ms: number): Promise<void> {
  if (ms < 1) return Promise.resolve();
  const done = new AbortController();
  let timeout: ReturnType<typeof setTimeout> | undefined;
  const real = new Promise<void>((resolve) => {
    timeout = setTimeout(resolve, ms);
  });
  return Promise.race([clock.sleep(ms, done.signal), real]).finally(() => {
    done.abort(ENDED);
    clearTimeout(timeout);
  });
}

function failOption(message: string): never {
  throw new SagaDefinitionError('OPTION_INVALID', message);
}

/** @throws SagaDefinitionError `OPTION_INVALID` when `options.em` is not an EntityManager. */
function assertEntityManager(options: SagaRuntimeOptions): void {
  if (!options?.em || typeof (options.em as { fork?: unknown }).fork !== 'function') {
    failOption("SagaRuntime needs 'em': pass your MikroORM EntityManager (orm.em).");
  }
}

/**
 * Applies the documented defaults and checks ranges. `groupsAtOnce`: the database's default of
 * `groupCommit.maxGroups` (`DialectAdapter.groupsAtOnce`).
 */
export function resolveRuntimeOptions(options: SagaRuntimeOptions, groupsAtOnce = DEFAULT_GROUP_MAX_GROUPS): ResolvedSagaRuntimeOptions {
  assertEntityManager(options);
  if (!Array.isArray(options.sagas)) failOption("SagaRuntime needs 'sagas': an array of saga definitions from defineSaga().");
  const maxAttempts = options.concurrency?.maxAttempts ?? DEFAULT_MAX_ATTEMPTS;
  const baseDelayMs = options.concurrency?.baseDelayMs ?? DEFAULT_RETRY_BASE_DELAY_MS;
  const maxDelayMs = options.concurrency?.maxDelayMs ?? DEFAULT_RETRY_MAX_DELAY_MS;
  const maxPayloadBytes = options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
  if (!isIntegerIn(maxAttempts, 1, Number.MAX_SAFE_INTEGER)) {
    failOption(`concurrency.maxAttempts must be an integer from 1 to ${Number.MAX_SAFE_INTEGER}; got ${shownOption(maxAttempts)}.`);
  }
  for (const [name, value] of [
    ['baseDelayMs', baseDelayMs],
    ['maxDelayMs', maxDelayMs],
  ] as const) {
    if (!isNumberIn(value, 0, MAX_WAIT_MS))
      failOption(`concurrency.${name} must be a number of ms from 0 to ${MAX_WAIT_MS}; got ${shownOption(value)}.`);
  }
  const retentionMs = options.messageIds?.retentionMs ?? DEFAULT_MESSAGE_ID_RETENTION_MS;
  if (!isNumberIn(retentionMs, 0, MAX_SPAN_MS)) {
    failOption(`messageIds.retentionMs must be a number of ms from 0 to ${MAX_SPAN_MS} (100 years); got ${shownOption(retentionMs)}.`);
  }
  if (!isIntegerIn(maxPayloadBytes, 1, MAX_PAYLOAD_BYTES_LIMIT)) {
    failOption(`maxPayloadBytes must be an integer from 1 to ${MAX_PAYLOAD_BYTES_LIMIT}; got ${shownOption(maxPayloadBytes)}.`);
  }
  const groupCommit = resolveGroupCommit(options.groupCommit, groupsAtOnce, failOption);
  const calendars = new Map(Object.entries(options.calendars ?? {}));
  for (const [key, calendar] of calendars) {
    const keyIssue = nameProblem(key, { maxLength: COLUMN_LIMITS.calendarKey });
    if (keyIssue) failOption(`A calendar key ${keyIssue}: use keys of 1 to ${COLUMN_LIMITS.calendarKey} characters.`);
    if (typeof calendar?.addDuration !== 'function' || typeof calendar?.nextOpen !== 'function') {
      failOption(`Calendar '${key}' must implement BusinessCalendar (addDuration and nextOpen).`);
    }
  }
  return {
    em: options.em,
    sagas: options.sagas,
    clock: options.clock ?? systemClock,
    calendars,
    concurrency: { maxAttempts, baseDelayMs, maxDelayMs },
    maxPayloadBytes,
    onHandled: options.onHandled,
    messageIds: { retentionMs },
    verifySchema: options.verifySchema ?? DEFAULT_VERIFY_SCHEMA,
    groupCommit,
  };
}

function resolveGroupCommit(
  option: SagaRuntimeOptions['groupCommit'],
  groupsAtOnce: number,
  fail: (message: string) => never,
): GroupLimits | false {
  if (option === false) return false;
  if (option !== undefined && (typeof option !== 'object' || option === null)) {
    fail('groupCommit must be false or an object { maxUnits?, maxGroups?, lockTimeoutMs? }.');
  }
  const maxUnits = option?.maxUnits ?? DEFAULT_GROUP_MAX_UNITS;
  const maxGroups = option?.maxGroups ?? groupsAtOnce;
  const lockTimeoutMs = option?.lockTimeoutMs ?? DEFAULT_GROUP_LOCK_TIMEOUT_MS;
  for (const [name, value] of [
    ['maxUnits', maxUnits],
    ['maxGroups', maxGroups],
  ] as const) {
    if (!isIntegerIn(value, 1, Number.MAX_SAFE_INTEGER)) {
      fail(`groupCommit.${name} must be an integer from 1 to ${Number.MAX_SAFE_INTEGER}; got ${shownOption(value)}.`);
    }
  }
  // PostgreSQL's lock_timeout is an int of milliseconds.
  if (!isIntegerIn(lockTimeoutMs, 1, MAX_LOCK_TIMEOUT_MS)) {
    fail(`groupCommit.lockTimeoutMs must be an integer from 1 to ${MAX_LOCK_TIMEOUT_MS}; got ${shownOption(lockTimeoutMs)}.`);
  }
  return { maxUnits, maxGroups, lockTimeoutMs };
}

/** The largest `lock_timeout` PostgreSQL takes, in milliseconds (INT_MAX). */
const MAX_LOCK_TIMEOUT_MS = 2_147_483_647;

/** The wording of a run of conflicts' last one, for the message of a {@link SagaConcurrencyError}. */
function lastConflict(cause: unknown, dialect: DialectAdapter): string {
  const kind = conflictKind(cause);
  return kind === 'lock wait' ? LAST_CONFLICT[kind][dialect.name] : LAST_CONFLICT[kind];
}
