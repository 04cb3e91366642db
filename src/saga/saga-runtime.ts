import { randomUUID } from 'node:crypto';
import {
  DeadlockException,
  type EntityManager,
  type EntityMetadata,
  LockWaitTimeoutException,
  OptimisticLockError,
  UniqueConstraintViolationException,
} from '@mikro-orm/core';
import type { BusinessCalendar } from '../calendars/business-calendar.js';
import { getCorrelationId } from '../correlation/correlation-context.js';
import { type DialectAdapter, dialectOf } from '../dialect/dialect-adapter.js';
import { assertSagaEntitiesRegistered } from '../entities/assert-saga-entities-registered.js';
import { COLUMN_LIMITS } from '../entities/dispatch-states.js';
import { SagaState } from '../entities/saga-state.js';
import {
  SagaConcurrencyError,
  SagaCorrelationError,
  SagaDefinitionError,
  SagaError,
  SagaPersistenceError,
  SagaValidationError,
} from '../errors.js';
import { uuidV7 } from '../ids/uuid-v7.js';
import { insertOutboxMessages, type OutboxWrite } from '../sql/outbox-statements.js';
import { guardSagaVersion } from '../sql/saga-statements.js';
import {
  deleteAllPendingTimers,
  deletePendingTimers,
  deletePendingTimersOfOtherSteps,
  insertTimers,
  markTimerFired,
  replacePendingTimer,
  type TimerWrite,
} from '../sql/timer-statements.js';
import { SagaMetrics, type SagaStats } from '../telemetry/saga-metrics.js';
import { type Clock, systemClock } from '../time/clock.js';
import { TIMER_SCOPES } from '../timers/timer-plan.js';
import type { SagaDefinition, SagaMessage } from './define-saga.js';
import { HANDLE_OUTCOMES, type HandleResult, IGNORE_REASONS, type IgnoreReason } from './handle-result.js';
import { type FiringTimer, RecordingStepContext, type StepContextSettings } from './step-context.js';

/** Default of `concurrency.maxAttempts`: units of work tried per message before a `SagaConcurrencyError`. */
export const DEFAULT_MAX_ATTEMPTS = 10;
/** Default of `concurrency.baseDelayMs`: the first retry waits up to this long (full jitter), doubling after. */
export const DEFAULT_RETRY_BASE_DELAY_MS = 5;
/** Default of `concurrency.maxDelayMs`: cap of the wait between two retries, in milliseconds. */
export const DEFAULT_RETRY_MAX_DELAY_MS = 250;
/** Default of `maxPayloadBytes`: largest JSON text of one timer or outbox message, in UTF-8 bytes. */
export const DEFAULT_MAX_PAYLOAD_BYTES = 65_536;

// Any saga definition, whatever its state and message types.
// biome-ignore lint/suspicious/noExplicitAny: the runtime is heterogeneous over saga types.
type AnySagaDefinition = SagaDefinition<any, any, any>;

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
    /** Units of work tried per message, the first included. Default {@link DEFAULT_MAX_ATTEMPTS} (10). */
    readonly maxAttempts?: number;
    /** Upper bound of the first retry's random wait, ms. Default {@link DEFAULT_RETRY_BASE_DELAY_MS} (5). */
    readonly baseDelayMs?: number;
    /** Cap of any retry's random wait, ms. Default {@link DEFAULT_RETRY_MAX_DELAY_MS} (250). */
    readonly maxDelayMs?: number;
  };
  /** Largest JSON text of a timer or outbox message, bytes. Default {@link DEFAULT_MAX_PAYLOAD_BYTES} (64 KiB). */
  readonly maxPayloadBytes?: number;
  /**
   * Called after each message (including each timer delivery) was handled, with its result: for tracing and
   * audit logs. It runs after the commit; what it throws is ignored. Default: none.
   */
  readonly onHandled?: (event: HandledEvent) => void;
}

/** What {@link SagaRuntimeOptions.onHandled} receives. */
export interface HandledEvent {
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
}

/** Options of one `handle` call. */
export interface HandleOptions {
  /** Correlation id to handle the message under. Default: the ambient one, else a new uuid. */
  readonly correlationId?: string;
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

interface RegisteredSaga {
  readonly definition: AnySagaDefinition;
  readonly meta: EntityMetadata;
  readonly settings: StepContextSettings;
}

type Target = { readonly kind: 'correlation'; readonly value: unknown } | { readonly kind: 'timer'; readonly timer: TimerDelivery };

/** Another unit of work changed the saga between our read and our write. */
class VersionConflict extends Error {}
/** The timer being delivered lost its claim. */
class StaleTimer extends Error {}

/**
 * Handles messages for a set of sagas. Each message is one unit of work per saga instance:
 * load the instance, run the step (outside any transaction), then write the state change, the timer
 * changes and the outbox rows in one transaction guarded by the instance's version. A conflict rolls
 * everything back and re-runs the step on fresh state, a bounded number of times.
 */
export class SagaRuntime {
  readonly options: ResolvedSagaRuntimeOptions;
  /** The database's capabilities, shared with the dispatcher. */
  readonly dialect: DialectAdapter;
  private readonly sagas = new Map<string, RegisteredSaga>();
  private readonly metrics = new SagaMetrics();

  /**
   * @throws SagaDefinitionError when a saga's state entity is not registered in MikroORM, does not extend
   *   `SagaState`, its correlation property is missing or not unique, two sagas share a name, or an
   *   option is out of range.
   */
  constructor(options: SagaRuntimeOptions) {
    this.options = resolveRuntimeOptions(options);
    this.dialect = dialectOf(this.options.em);
    assertSagaEntitiesRegistered(this.options.em.getMetadata());
    for (const definition of this.options.sagas) {
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
   * runs the step, and commits its effects in one transaction.
   * @throws SagaValidationError / SagaCorrelationError for bad input, before anything is written.
   * @throws SagaConcurrencyError when conflicts outlast `concurrency.maxAttempts`; nothing was written.
   * @throws SagaPersistenceError when the write fails otherwise; nothing was written.
   * Errors thrown by the step itself propagate unchanged; nothing was written.
   */
  async handle<TIn extends SagaMessage>(
    // biome-ignore lint/suspicious/noExplicitAny: any state and outgoing types; the message type is what is checked.
    definition: SagaDefinition<any, TIn, any>,
    message: TIn,
    options: HandleOptions = {},
  ): Promise<HandleResult> {
    const saga = this.registered(definition.name);
    const type = messageTypeOf(message, saga.definition.name);
    if (!saga.definition.steps.has(type)) {
      throw new SagaValidationError(
        'MESSAGE_TYPE_UNKNOWN',
        `Saga ${saga.definition.name} has no step for message type '${type}': add steps.${type}, or do not send it this message.`,
        { sagaType: saga.definition.name, messageType: type },
      );
    }
    const correlation = saga.definition.correlate(message);
    if (!correlation.defined) {
      throw new SagaCorrelationError(
        'CORRELATION_UNDEFINED',
        `Saga ${saga.definition.name} does not say how '${type}' finds its instance: add correlation.from.${type}.`,
        { sagaType: saga.definition.name, messageType: type },
      );
    }
    if (correlation.value === undefined || correlation.value === null || correlation.value === '') {
      throw new SagaCorrelationError(
        'CORRELATION_MISSING',
        `Message '${type}' carries no value for ${saga.definition.name}.${saga.definition.correlationProperty}: set the correlation field on the message before handling it.`,
        { sagaType: saga.definition.name, messageType: type },
      );
    }
    const correlationId = options.correlationId ?? getCorrelationId() ?? randomUUID();
    return this.run(saga, message, { kind: 'correlation', value: correlation.value }, correlationId);
  }

  /**
   * Handles `message` for every registered saga with a step for its type, one unit of work each,
   * in registration order. Returns one result per saga (none when no saga handles the type).
   */
  async route<TMessage extends SagaMessage>(message: TMessage, options: HandleOptions = {}): Promise<HandleResult[]> {
    const type = messageTypeOf(message, 'any saga');
    const results: HandleResult[] = [];
    for (const saga of this.sagas.values()) {
      if (saga.definition.steps.has(type)) results.push(await this.handle(saga.definition, message, options));
    }
    return results;
  }

  /**
   * Delivers a claimed timer to its own saga instance. The timer is stamped `fired` in the same
   * transaction as the state change it causes, only while `timer.token` is still its token; otherwise
   * nothing is written and the outcome is `stale`.
   */
  async deliverTimer(timer: TimerDelivery): Promise<HandleResult> {
    const saga = this.registered(timer.sagaType);
    const message = timer.payload as SagaMessage;
    if (messageTypeOf(message, saga.definition.name) !== timer.messageType || !saga.definition.steps.has(timer.messageType)) {
      throw new SagaValidationError(
        'MESSAGE_TYPE_UNKNOWN',
        `Timer '${timer.name}' of saga ${timer.sagaType}/${timer.sagaId} carries '${timer.messageType}', which the saga has no step for: restore the step or cancel the timer.`,
        { sagaType: timer.sagaType, sagaId: timer.sagaId, timerName: timer.name, messageType: timer.messageType },
      );
    }
    return this.run(saga, message, { kind: 'timer', timer }, timer.correlationId ?? randomUUID());
  }

  private registered(sagaType: string): RegisteredSaga {
    const saga = this.sagas.get(sagaType);
    if (!saga) {
      throw new SagaDefinitionError(
        'DEFINITION_INVALID',
        `Saga '${sagaType}' is not registered on this runtime: add its definition to the 'sagas' option.`,
        { sagaType },
      );
    }
    return saga;
  }

  private register(definition: AnySagaDefinition): RegisteredSaga {
    const fail = (message: string): never => {
      throw new SagaDefinitionError('DEFINITION_INVALID', message, { sagaType: definition.name });
    };
    const className = definition.state?.name ?? String(definition.state);
    const meta = this.options.em.getMetadata().find(className);
    if (!meta || meta.class !== definition.state) {
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
    if (definition.stepProperty !== undefined && !meta!.properties[definition.stepProperty]) {
      fail(`Saga ${definition.name}: ${className} has no property '${definition.stepProperty}' (stepProperty).`);
    }
    return {
      definition,
      meta: meta!,
      settings: {
        calendars: this.options.calendars,
        maxPayloadBytes: this.options.maxPayloadBytes,
        knownMessageTypes: new Set(definition.steps.keys()),
        stepScopedByDefault: definition.stepProperty !== undefined,
      },
    };
  }

  private async run(saga: RegisteredSaga, message: SagaMessage, target: Target, correlationId: string): Promise<HandleResult> {
    const { maxAttempts } = this.options.concurrency;
    let conflicts = 0;
    for (let attempt = 1; ; attempt++) {
      try {
        const result = await this.attempt(saga, message, target, correlationId, attempt, conflicts);
        this.count(result);
        try {
          this.options.onHandled?.({ message, result, timer: target.kind === 'timer' ? target.timer : undefined });
        } catch {
          // A tracing hook must not turn a committed unit of work into a failure.
        }
        return result;
      } catch (error) {
        if (!(error instanceof RetryableConflict)) throw error;
        conflicts++;
        this.metrics.add('concurrencyConflicts', saga.definition.name);
        if (attempt >= maxAttempts) {
          throw new SagaConcurrencyError(
            'CONCURRENCY_CONFLICT',
            `Saga ${saga.definition.name}${error.sagaId ? `/${error.sagaId}` : ''}: message '${message.type}' met ${conflicts} concurrency conflicts in a row (other units of work kept committing first); nothing of it was written. Retry the message later, or raise concurrency.maxAttempts.`,
            { sagaType: saga.definition.name, sagaId: error.sagaId, messageType: message.type, attempts: attempt },
            { cause: error.cause },
          );
        }
        await sleepWithJitter(attempt, this.options.concurrency);
      }
    }
  }

  private async attempt(
    saga: RegisteredSaga,
    message: SagaMessage,
    target: Target,
    correlationId: string,
    attempts: number,
    conflicts: number,
  ): Promise<HandleResult> {
    const { definition, meta } = saga;
    const em = this.options.em.fork({ clear: true });
    const now = this.options.clock.now();
    const timer = target.kind === 'timer' ? target.timer : undefined;
    const base = { sagaType: definition.name, messageType: message.type, attempts, conflicts };
    const none = { changed: false, completed: false, timersScheduled: 0, timersCancelled: 0, messagesSent: 0 };

    const where = timer ? { id: timer.sagaId } : { [definition.correlationProperty]: target.kind === 'correlation' ? target.value : null };
    let state = (await em.findOne(definition.state, where as never)) as SagaState | null;
    let isNew = false;
    if (!state) {
      if (timer || !definition.startedBy.has(message.type)) {
        if (timer) await this.retireTimerOf(em, timer, now, null);
        return {
          ...base,
          ...none,
          outcome: HANDLE_OUTCOMES.IGNORED,
          reason: IGNORE_REASONS.NO_INSTANCE,
          sagaId: timer?.sagaId ?? null,
          version: null,
          step: null,
        };
      }
      isNew = true;
      state = em.create(definition.state, {
        [definition.correlationProperty]: (target as { value: unknown }).value,
        createdAt: now,
        updatedAt: now,
        version: 0,
      } as never) as SagaState;
    } else if (state.completedAt && !definition.handlesCompleted(message.type)) {
      if (timer) await this.retireTimerOf(em, timer, now, state);
      return this.ignored(base, none, state, saga, IGNORE_REASONS.COMPLETED);
    }
    const loadedVersion = state.version;
    const completedBefore = state.completedAt !== null;
    const stepBefore = readStep(state, definition.stepProperty);

    const firing: FiringTimer | undefined = timer && { id: timer.id, name: timer.name, dueAt: timer.dueAt, attempts: timer.attempts };
    const ctx = new RecordingStepContext(definition.name, state.id, isNew, now, correlationId, firing, saga.settings);
    const step = definition.steps.get(message.type)!;
    try {
      await step(state, message, ctx);
    } finally {
      ctx.close();
    }

    if (ctx.completed && !state.completedAt) state.completedAt = now;
    const completed = state.completedAt !== null;
    const stepAfter = readStep(state, definition.stepProperty);
    const uow = em.getUnitOfWork();
    uow.computeChangeSets();
    const changed = uow.getChangeSets().length > 0;
    if (changed && !isNew) {
      state.version = loadedVersion + 1;
      state.updatedAt = now;
    }

    // A completed saga keeps no pending timers: completing removes them, and what a step of a completed
    // saga schedules is discarded.
    const scheduled = completed ? [] : ctx.timers.scheduled;
    const cancelAll = (completed && !completedBefore) || ctx.timers.cancelsAll;
    const cancelled = cancelAll ? [] : ctx.timers.cancelled;
    const stepChanged = !isNew && definition.stepProperty !== undefined && stepAfter !== stepBefore;
    const touchesTimers = !isNew && (cancelAll || cancelled.length > 0 || stepChanged);
    const hasWrites = changed || timer || touchesTimers || scheduled.length > 0 || ctx.outgoing.length > 0;
    if (!hasWrites) {
      return this.result(HANDLE_OUTCOMES.HANDLED, base, state, saga, { ...none, completed });
    }

    const timerWrites: TimerWrite[] = scheduled.map((planned) => ({
      id: uuidV7(),
      sagaType: definition.name,
      sagaId: state.id,
      name: planned.name,
      step: planned.scope === TIMER_SCOPES.STEP && definition.stepProperty !== undefined ? stepAfter : null,
      dueAt: planned.dueAt,
      messageType: planned.messageType,
      payloadJson: planned.payloadJson,
      calendarKey: planned.calendarKey,
      correlationId: truncate(correlationId, COLUMN_LIMITS.correlationId),
      token: randomUUID(),
      createdAt: now,
    }));
    const outboxWrites: OutboxWrite[] = ctx.outgoing.map((out) => ({
      id: uuidV7(),
      sagaType: definition.name,
      sagaId: state.id,
      messageType: out.messageType,
      payloadJson: out.payloadJson,
      headersJson: JSON.stringify(out.headers),
      correlationId: truncate(correlationId, COLUMN_LIMITS.correlationId),
      token: randomUUID(),
      createdAt: now,
    }));

    let timersCancelled = 0;
    // A racing start message or timer name surfaces as a unique violation; retried, the re-read sees the winner.
    let inserting = isNew;
    await em.begin();
    try {
      // The saga row is written (or version-checked) first: it is the lock every unit of work on this
      // instance takes first, so timer and outbox writes of two units never interleave or deadlock.
      if (changed) await em.flush();
      else if (!isNew && !(await guardSagaVersion(em, meta, state.id, loadedVersion))) throw new VersionConflict();
      if (timer && (await markTimerFired(em, timer.id, timer.token, now)) !== 1) throw new StaleTimer();
      if (!isNew) {
        // Deletes run before the writes below: the filtered unique index must never see two pending rows
        // of one name, and MikroORM would order a flush's INSERTs before its DELETEs.
        if (cancelAll) timersCancelled += await deleteAllPendingTimers(em, definition.name, state.id);
        else {
          if (stepChanged) timersCancelled += await deletePendingTimersOfOtherSteps(em, definition.name, state.id, stepAfter);
          if (cancelled.length > 0) timersCancelled += await deletePendingTimers(em, definition.name, state.id, cancelled);
        }
      }
      const inserts: TimerWrite[] = [];
      for (const write of timerWrites) {
        if (isNew || (await replacePendingTimer(em, write)) === 0) inserts.push(write);
      }
      inserting ||= inserts.length > 0;
      if (inserts.length > 0) await insertTimers(em, inserts);
      if (outboxWrites.length > 0) await insertOutboxMessages(em, outboxWrites);
      await em.commit();
    } catch (error) {
      await em.rollback().catch(() => undefined);
      if (error instanceof StaleTimer) {
        return { ...base, ...none, outcome: HANDLE_OUTCOMES.STALE, sagaId: state.id, version: loadedVersion, step: stepBefore };
      }
      if (isConflict(error, inserting)) throw new RetryableConflict(state.id, error);
      if (error instanceof SagaError) throw error;
      throw new SagaPersistenceError(
        'PERSISTENCE_FAILED',
        `Saga ${definition.name}/${state.id}: writing the effects of '${message.type}' failed and was rolled back, so nothing of it was written: ${(error as Error)?.message ?? error}`,
        { sagaType: definition.name, sagaId: state.id, messageType: message.type },
        { cause: error },
      );
    }
    return this.result(isNew ? HANDLE_OUTCOMES.STARTED : HANDLE_OUTCOMES.HANDLED, base, state, saga, {
      changed,
      completed,
      timersScheduled: timerWrites.length,
      timersCancelled,
      messagesSent: outboxWrites.length,
    });
  }

  /**
   * Takes a timer whose saga is gone or completed out of the pending set (stamped fired, token-checked),
   * so it is not delivered again. A lost claim means another unit of work already did something with it.
   */
  private async retireTimerOf(em: EntityManager, timer: TimerDelivery, now: Date, state: SagaState | null): Promise<void> {
    const fork = em.fork({ clear: true });
    await fork.begin();
    try {
      await markTimerFired(fork, timer.id, timer.token, now);
      await fork.commit();
    } catch (error) {
      await fork.rollback().catch(() => undefined);
      throw new SagaPersistenceError(
        'PERSISTENCE_FAILED',
        `Timer '${timer.name}' of saga ${timer.sagaType}/${timer.sagaId} (${state ? 'completed' : 'no instance'}) could not be retired: ${(error as Error)?.message}`,
        { sagaType: timer.sagaType, sagaId: timer.sagaId, timerName: timer.name },
        { cause: error },
      );
    }
  }

  private ignored(
    base: Pick<HandleResult, 'sagaType' | 'messageType' | 'attempts' | 'conflicts'>,
    none: Pick<HandleResult, 'changed' | 'completed' | 'timersScheduled' | 'timersCancelled' | 'messagesSent'>,
    state: SagaState,
    saga: RegisteredSaga,
    reason: IgnoreReason,
  ): HandleResult {
    return { ...this.result(HANDLE_OUTCOMES.IGNORED, base, state, saga, { ...none, completed: state.completedAt !== null }), reason };
  }

  private result(
    outcome: HandleResult['outcome'],
    base: Pick<HandleResult, 'sagaType' | 'messageType' | 'attempts' | 'conflicts'>,
    state: SagaState,
    saga: RegisteredSaga,
    effects: Pick<HandleResult, 'changed' | 'completed' | 'timersScheduled' | 'timersCancelled' | 'messagesSent'>,
  ): HandleResult {
    return { ...base, ...effects, outcome, sagaId: state.id, version: state.version, step: readStep(state, saga.definition.stepProperty) };
  }

  private count(result: HandleResult): void {
    const type = result.sagaType;
    if (result.outcome === HANDLE_OUTCOMES.STARTED) this.metrics.add('started', type);
    if (result.outcome === HANDLE_OUTCOMES.HANDLED) this.metrics.add('handled', type);
    if (result.reason === IGNORE_REASONS.NO_INSTANCE) this.metrics.add('ignoredNoInstance', type);
    if (result.reason === IGNORE_REASONS.COMPLETED) this.metrics.add('ignoredCompleted', type);
    if (result.outcome === HANDLE_OUTCOMES.STALE) this.metrics.add('timersStale', type);
    if (result.completed && result.changed) this.metrics.add('completed', type);
    this.metrics.add('timersScheduled', type, result.timersScheduled);
    this.metrics.add('timersCancelled', type, result.timersCancelled);
    this.metrics.add('messagesSent', type, result.messagesSent);
  }
}

/** A conflict worth re-running the unit of work for. */
class RetryableConflict extends Error {
  constructor(
    readonly sagaId: string | undefined,
    override readonly cause: unknown,
  ) {
    super('concurrency conflict');
  }
}

function isConflict(error: unknown, inserting: boolean): boolean {
  return (
    error instanceof VersionConflict ||
    error instanceof OptimisticLockError ||
    error instanceof DeadlockException ||
    error instanceof LockWaitTimeoutException ||
    // A racing start message or timer name: the re-read finds the other unit's row.
    (inserting && error instanceof UniqueConstraintViolationException)
  );
}

function messageTypeOf(message: unknown, sagaType: string): string {
  const type = (message as { type?: unknown } | null | undefined)?.type;
  if (typeof type !== 'string' || type === '') {
    throw new SagaValidationError(
      'MESSAGE_TYPE_MISSING',
      `A message for ${sagaType} has no 'type': every message is an object with a non-empty string 'type'.`,
      { sagaType },
    );
  }
  return type;
}

function readStep(state: SagaState, stepProperty: string | undefined): string | null {
  if (stepProperty === undefined) return null;
  const value = (state as unknown as Record<string, unknown>)[stepProperty];
  return value === null || value === undefined ? null : String(value);
}

function truncate(value: string, length: number): string {
  return value.length > length ? value.slice(0, length) : value;
}

function sleepWithJitter(attempt: number, options: ResolvedSagaRuntimeOptions['concurrency']): Promise<void> {
  // Full jitter: a random wait below an exponentially growing cap spreads competing retries apart.
  // These few milliseconds only de-synchronise competitors; they are not business time, so they use real timers.
  const cap = Math.min(options.maxDelayMs, options.baseDelayMs * 2 ** (attempt - 1));
  const ms = Math.random() * cap;
  return ms < 1 ? Promise.resolve() : new Promise((resolve) => setTimeout(resolve, ms));
}

/** Applies the documented defaults and checks ranges. */
export function resolveRuntimeOptions(options: SagaRuntimeOptions): ResolvedSagaRuntimeOptions {
  const fail = (message: string): never => {
    throw new SagaDefinitionError('OPTION_INVALID', message);
  };
  if (!options?.em || typeof (options.em as { fork?: unknown }).fork !== 'function') {
    fail("SagaRuntime needs 'em': pass your MikroORM EntityManager (orm.em).");
  }
  if (!Array.isArray(options.sagas)) fail("SagaRuntime needs 'sagas': an array of saga definitions from defineSaga().");
  const maxAttempts = options.concurrency?.maxAttempts ?? DEFAULT_MAX_ATTEMPTS;
  const baseDelayMs = options.concurrency?.baseDelayMs ?? DEFAULT_RETRY_BASE_DELAY_MS;
  const maxDelayMs = options.concurrency?.maxDelayMs ?? DEFAULT_RETRY_MAX_DELAY_MS;
  const maxPayloadBytes = options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1) fail(`concurrency.maxAttempts must be an integer >= 1; got ${maxAttempts}.`);
  if (!(baseDelayMs >= 0) || !(maxDelayMs >= 0)) fail('concurrency.baseDelayMs and maxDelayMs must be >= 0.');
  if (!Number.isInteger(maxPayloadBytes) || maxPayloadBytes < 1)
    fail(`maxPayloadBytes must be a positive integer; got ${maxPayloadBytes}.`);
  const calendars = new Map(Object.entries(options.calendars ?? {}));
  for (const [key, calendar] of calendars) {
    if (typeof calendar?.addDuration !== 'function' || typeof calendar?.nextOpen !== 'function') {
      fail(`Calendar '${key}' must implement BusinessCalendar (addDuration and nextOpen).`);
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
  };
}
