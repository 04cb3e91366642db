import type { EntityManager } from '@mikro-orm/core';
import type { BusinessCalendar } from '../calendars/business-calendar.js';
import type { TimerDelivery } from '../contracts.js';
import { COLUMN_LIMITS } from '../entities/dispatch-states.js';
import { SagaDefinitionError } from '../errors.js';
import { type Clock, systemClock } from '../time/clock.js';
import { isIntegerIn, isNumberIn, MAX_SPAN_MS, MAX_WAIT_MS, shownOption } from '../time/option-ranges.js';
import type { HandleResult } from './handle-result.js';
import { DEFAULT_MESSAGE_ID_RETENTION_MS } from './handled-messages.js';
import type { AnySagaDefinition } from './registered-saga.js';
import type { SagaMessage } from './saga-message.js';
import { nameProblem } from './stored-text.js';
import {
  DEFAULT_GROUP_LOCK_TIMEOUT_MS,
  DEFAULT_GROUP_MAX_GROUPS,
  DEFAULT_GROUP_MAX_UNITS,
  type GroupLimits,
} from './unit-of-work/group-commit.js';

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
