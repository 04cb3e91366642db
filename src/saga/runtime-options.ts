import type { EntityManager } from '@mikro-orm/core';
import type { BusinessCalendar } from '../calendars/business-calendar.js';
import type { TimerDelivery } from '../contracts.js';
import { COLUMN_LIMITS } from '../entities/dispatch-states.js';
import { SagaDefinitionError } from '../errors.js';
import { consoleLogger, resolveLogger, type SagaLogger } from '../telemetry/logger.js';
import { type Clock, systemClock } from '../time/clock.js';
import { isIntegerIn, isNumberIn, MAX_SPAN_MS, MAX_WAIT_MS, shownOption } from '../time/option-ranges.js';
import type { HandleResult } from './handle-result.js';
import type { AnySagaDefinition } from './registered-saga.js';
import type { SagaMessage } from './saga-message.js';
import { nameProblem } from './stored-text.js';

/** Largest `maxPayloadBytes` the runtime takes: 268,435,455 bytes, the largest `jsonb` value PostgreSQL stores. */
export const MAX_PAYLOAD_BYTES_LIMIT = 268_435_455;

/** The runtime's defaults, shaped like {@link SagaRuntimeOptions} (also `SagaRuntime.defaults`). */
export const RUNTIME_DEFAULTS = Object.freeze({
  /**
   * Units of work tried per message before a `SagaConcurrencyError` (`maxAttempts`); the first retry waits up to
   * `baseDelayMs` (full jitter), doubling after, and no wait is longer than `maxDelayMs`.
   */
  concurrency: Object.freeze({ maxAttempts: 10, baseDelayMs: 5, maxDelayMs: 250 }),
  /** Largest JSON text of one timer message, or of one outbox message with its headers, in UTF-8 bytes. */
  maxPayloadBytes: 65_536,
  /** How long a handled message id is remembered, ms (7 days). */
  messageIds: Object.freeze({ retentionMs: 604_800_000 }),
  /** The schema is checked before the first unit of work. */
  verifySchema: true,
  groupCommit: Object.freeze({
    /**
     * Most write phases of units of work committed in one transaction. Below 64 on purpose: PostgreSQL gives each
     * savepoint that writes a subtransaction id, and a transaction holding more than 64 overflows its cache of
     * them, which makes every other session's snapshots slower.
     */
    maxUnits: 32,
    /** Most group transactions a runtime writes at once, on PostgreSQL. On SQLite it is 1 (one writer at a time). */
    maxGroups: 2,
    /**
     * On PostgreSQL, how long a group transaction waits for a row lock another transaction holds before the unit
     * that needs it leaves the group. Far above the time one group holds its rows (a few milliseconds per unit),
     * so units of this runtime that touch one saga still wait for each other's groups.
     */
    lockTimeoutMs: 250,
  }),
  /** Records deleted per statement by `purgeExpiredMessageIds()` (and the operator's `purge`). */
  purgeBatchSize: 1_000,
  /** PostgreSQL: a commit of rows due at once wakes the dispatchers of other processes (NOTIFY). */
  notifyDispatchers: true,
});

/** The limits of group commit (`groupCommit` of the runtime's options, resolved). */
export interface GroupLimits {
  readonly maxUnits: number;
  readonly maxGroups: number;
  readonly lockTimeoutMs: number;
}

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
    /** Units of work tried per message, the first included, 1 to 2^53 - 1. Default 10. */
    readonly maxAttempts?: number;
    /** Upper bound of the first retry's random wait, ms, 0 to {@link MAX_WAIT_MS}. Default 5. */
    readonly baseDelayMs?: number;
    /** Cap of any retry's random wait, ms, 0 to {@link MAX_WAIT_MS}. Default 250. */
    readonly maxDelayMs?: number;
  };
  /**
   * Largest JSON text of a timer message, or of a sent message and its headers together, in UTF-8 bytes.
   * 1 to {@link MAX_PAYLOAD_BYTES_LIMIT}. Default 65,536 (64 KiB).
   */
  readonly maxPayloadBytes?: number;
  /**
   * Called after each message (including each timer delivery) was handled, with its result: for tracing and
   * audit logs. It runs after the commit; for a unit joined to your transaction (`handle(..., { em })`), once its
   * savepoint is released, before your transaction commits (which may still roll back). What it throws is logged
   * (warn) and otherwise ignored. Default: none.
   */
  readonly onHandled?: (event: HandledEvent) => void;
  /**
   * Where the runtime reports, with structured fields: the schema verified (info), a concurrency conflict retried
   * (debug), an `onHandled` that threw (warn), a commit whose outcome is unknown (error). Dispatchers on this runtime
   * use it too unless given their own. A `SagaLogger` (`consoleLogger('info')`, `silentLogger`, `pinoLogger(...)`,
   * `mikroOrmLogger(...)`). Default `consoleLogger('warn')`.
   */
  readonly logger?: SagaLogger;
  /** Idempotent handling by message id (`handle(..., { messageId })`). */
  readonly messageIds?: {
    /**
     * How long a handled message id is remembered, ms: a redelivery within it is a `duplicate`, one after it
     * (and after {@link SagaRuntime.purgeExpiredMessageIds} ran) is handled anew. Make it longer than your
     * broker's redelivery horizon. 0 to {@link MAX_SPAN_MS} (100 years). Default 604,800,000 (7 days).
     */
    readonly retentionMs?: number;
  };
  /**
   * Check the database schema (library tables, columns, indexes, each saga table's base columns and active-row
   * index; `verifySagaSchema`) once, before the first unit of work: a mismatch is a `SagaSchemaError` naming every
   * difference, instead of a failure halfway through a message. One catalog read. Default
   * true.
   */
  readonly verifySchema?: boolean;
  /**
   * PostgreSQL: after a unit of work commits an outbox message or a timer due at once, send one NOTIFY (on a pooled
   * connection, outside the unit's transaction; coalesced, at most one in flight), which wakes the waiting
   * dispatchers of other processes that listen (the dispatcher's `listen`): they claim the rows at once instead
   * of at their next poll. A failed NOTIFY is ignored (polls find the rows). Turn it off behind a pooler that drops
   * notifications (PgBouncer in transaction mode) or to save the statement. No effect on SQLite. Default true.
   */
  readonly notifyDispatchers?: boolean;
  /**
   * Group commit: the write phases of units of work that are ready while earlier ones are being written are
   * written together, in one transaction with a savepoint per unit (each unit still commits or fails alone;
   * docs/guarantees.md). A unit that finds a group slot free is written at once. `false`: every unit of work
   * in its own transaction. Default: on, with 32 units per group and 2 groups at once (1 on SQLite).
   */
  readonly groupCommit?:
    | false
    | {
        /** Most units of work in one group transaction. Default 32. */
        readonly maxUnits?: number;
        /**
         * Most group transactions written at once (each holds one connection). Default 2 on
         * PostgreSQL, 1 on SQLite (one writer at a time: a second group would only wait for the first).
         */
        readonly maxGroups?: number;
        /**
         * PostgreSQL: how long a group transaction waits for a row lock another transaction holds. A unit that
         * waits longer leaves its group (rolled back to its savepoint, not charged an attempt) and runs again in
         * a transaction of its own, which waits as the connection's settings allow; the group goes on. A shorter
         * `lock_timeout` of the connection is kept. Default 250.
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
  /** The logger given, checked, or `consoleLogger('warn')`. */
  readonly logger: SagaLogger;
  readonly messageIds: { readonly retentionMs: number };
  readonly verifySchema: boolean;
  readonly notifyDispatchers: boolean;
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
  /**
   * Your EntityManager inside an open transaction (the one `em.transactional()` hands its callback, or one after
   * `em.begin()`): the unit of work then runs inside that transaction. The instance is read through it; the step
   * still runs without it. The saga row, timers, outbox rows and message id are written after a savepoint of the
   * unit's own, on your transaction's connection. They commit only when your transaction commits, and vanish when it
   * rolls back. Such a unit is never grouped with others and never retried: a concurrency conflict rolls it back to
   * its savepoint and throws `SagaConcurrencyError` `CONFLICT_IN_APP_TRANSACTION` (run your transaction again).
   * Another failure rolls it back to its savepoint too: on PostgreSQL your transaction takes statements again.
   * One joined unit at a time per transaction (await each call). Its saga row stays locked until your transaction
   * ends. An EntityManager in no open transaction is refused with `TRANSACTION_REQUIRED` before anything is read.
   * Default: none (the unit of work runs in a transaction of the runtime's own). docs/integration.md, "Handle
   * inside your transaction".
   */
  readonly em?: EntityManager;
}

function failOption(message: string): never {
  throw new SagaDefinitionError('OPTION_INVALID', message);
}

/** @throws SagaDefinitionError `OPTION_INVALID` when `options.em` is not an EntityManager. */
export function assertEntityManager(options: SagaRuntimeOptions): void {
  if (!options?.em || typeof (options.em as { fork?: unknown }).fork !== 'function') {
    failOption("SagaRuntime needs 'em': pass your MikroORM EntityManager (orm.em).");
  }
}

/**
 * Applies the documented defaults and checks ranges. `groupsAtOnce`: the database's default of
 * `groupCommit.maxGroups` (`DialectAdapter.groupsAtOnce`).
 */
export function resolveRuntimeOptions(
  options: SagaRuntimeOptions,
  groupsAtOnce: number = RUNTIME_DEFAULTS.groupCommit.maxGroups,
): ResolvedSagaRuntimeOptions {
  assertEntityManager(options);
  if (!Array.isArray(options.sagas)) failOption("SagaRuntime needs 'sagas': an array of saga definitions from defineSaga().");
  const maxAttempts = options.concurrency?.maxAttempts ?? RUNTIME_DEFAULTS.concurrency.maxAttempts;
  const baseDelayMs = options.concurrency?.baseDelayMs ?? RUNTIME_DEFAULTS.concurrency.baseDelayMs;
  const maxDelayMs = options.concurrency?.maxDelayMs ?? RUNTIME_DEFAULTS.concurrency.maxDelayMs;
  const maxPayloadBytes = options.maxPayloadBytes ?? RUNTIME_DEFAULTS.maxPayloadBytes;
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
  const retentionMs = options.messageIds?.retentionMs ?? RUNTIME_DEFAULTS.messageIds.retentionMs;
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
    logger: resolveLogger(options.logger, 'SagaRuntime', consoleLogger('warn')),
    messageIds: { retentionMs },
    verifySchema: options.verifySchema ?? RUNTIME_DEFAULTS.verifySchema,
    notifyDispatchers: options.notifyDispatchers ?? RUNTIME_DEFAULTS.notifyDispatchers,
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
  const maxUnits = option?.maxUnits ?? RUNTIME_DEFAULTS.groupCommit.maxUnits;
  const maxGroups = option?.maxGroups ?? groupsAtOnce;
  const lockTimeoutMs = option?.lockTimeoutMs ?? RUNTIME_DEFAULTS.groupCommit.lockTimeoutMs;
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
