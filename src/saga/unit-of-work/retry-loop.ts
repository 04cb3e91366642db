import type { DialectAdapter } from '../../dialect/dialect-adapter.js';
import { SAGA_ERROR_CODES, SagaConcurrencyError, SagaError } from '../../errors.js';
import { conflictKind } from '../../orm/index.js';
import { describeError } from '../../telemetry/describe-error.js';
import type { StepSpan } from '../../telemetry/step-span.js';
import { type Clock, ENDED } from '../../time/clock.js';
import { HANDLE_OUTCOMES, type HandleResult, IGNORE_REASONS } from '../handle-result.js';
import type { RegisteredSaga } from '../registered-saga.js';
import type { ResolvedSagaRuntimeOptions } from '../runtime-options.js';
import { attempt, type UnitOfWork, type UnitOfWorkRuntime } from './attempt.js';
import { RetryableConflict } from './classify-failure.js';
import { LeftGroup } from './group-commit.js';
import type { HandleTarget } from './handle-target.js';
import { type RuntimeMessage, stepCopy } from './runtime-message.js';

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

/** A message for one saga, where it goes, the correlation id it is handled under, and the span it is handled in. */
export interface UnitOfWorkInput {
  readonly saga: RegisteredSaga;
  readonly message: RuntimeMessage;
  readonly target: HandleTarget;
  readonly correlationId: string;
  /** Hears of each conflict; the rows the unit writes store its trace context. */
  readonly span: StepSpan;
}

/**
 * Runs the unit of work of one message until an attempt ends: a conflict (another unit of work committed first)
 * rolls everything back and runs the step again on fresh state, up to `concurrency.maxAttempts` attempts with a
 * random wait between them; a unit that left its group for a held row runs again, alone, uncharged. Counts the
 * result and reports it to `onHandled`.
 * @throws SagaConcurrencyError when conflicts outlast `concurrency.maxAttempts`; nothing was written.
 */
export async function runUnitOfWork(runtime: UnitOfWorkRuntime, input: UnitOfWorkInput): Promise<HandleResult> {
  const { saga, message, target, span } = input;
  const { clock, concurrency } = runtime.options;
  const unit = unitOfWork(input);
  let conflicts = 0;
  /** Whether the unit of work writes in a transaction of its own: once it left a group for a held row. */
  let alone = false;
  /** How many times it left its group or took a turn in a row: paces its turns. */
  let turns = 0;
  for (let attempts = 1; ; attempts++) {
    try {
      const result = await attempt(runtime, unit, { attempts, conflicts, alone });
      reportHandled(runtime, result, message, target);
      return result;
    } catch (error) {
      if (error instanceof LeftGroup) {
        // Nothing of it was written and no other unit of work committed first: not an attempt, not a conflict.
        // Alone already: every solo slot was taken and its row was still held past its turn. It pauses before it
        // reads and tries again, on the runtime's clock (the row may stay held for as long as another
        // transaction lasts; a FakeClock's advance() ends the pause).
        if (alone) await pauseBeforeTurn(clock, turnPause(++turns, concurrency));
        alone = true;
        attempts--;
        continue;
      }
      if (!(error instanceof RetryableConflict)) throw reportedFailure(runtime, error);
      conflicts++;
      span.conflict();
      runtime.metrics.add('concurrencyConflicts', saga.definition.name);
      if (attempts >= concurrency.maxAttempts) throw concurrencyError(runtime.dialect, unit, error, { attempts, conflicts });
      runtime.options.logger.debug('concurrency conflict: the step runs again on fresh state', {
        sagaType: saga.definition.name,
        sagaId: error.sagaId,
        messageType: unit.message.type,
        attempt: attempts,
        maxAttempts: concurrency.maxAttempts,
      });
      await sleepWithJitter(attempts, concurrency);
    }
  }
}

/** The unit of work of `input`, as each attempt gets it. */
export function unitOfWork({ saga, message, target, correlationId, span }: UnitOfWorkInput): UnitOfWork {
  // Every run of the step gets a copy of its own: a step that changed its message and met a conflict runs
  // again on the message as it came, not as it left it.
  let first = message.first;
  const stepMessage = () => {
    const copy = first ?? stepCopy(saga, message);
    first = undefined;
    return copy;
  };
  return {
    saga,
    message: message.copy,
    stepMessage,
    target,
    correlationId,
    traceContext: span.traceContext,
    found: (sagaId) => span.found(sagaId),
  };
}

/** Counts a unit of work's result and hands it to `onHandled`. */
export function reportHandled(runtime: UnitOfWorkRuntime, result: HandleResult, message: RuntimeMessage, target: HandleTarget): void {
  countResult(runtime, result, target.kind === 'timer');
  try {
    runtime.options.onHandled?.({ message: message.original, result, timer: target.kind === 'timer' ? target.timer : undefined });
  } catch (error) {
    // A tracing hook must not turn a committed unit of work into a failure.
    runtime.options.logger.warn('onHandled threw; the unit of work stays committed', {
      sagaType: result.sagaType,
      sagaId: result.sagaId,
      outcome: result.outcome,
      error: describeError(error),
    });
  }
}

/** `error`, logged first when the caller cannot know whether its unit of work was written. */
function reportedFailure(runtime: UnitOfWorkRuntime, error: unknown): unknown {
  if (error instanceof SagaError && error.code === SAGA_ERROR_CODES.COMMIT_OUTCOME_UNKNOWN) {
    const { sagaType, sagaId, messageType } = error.details;
    runtime.options.logger.error('commit outcome unknown: the unit of work may or may not be written', {
      sagaType,
      sagaId,
      messageType,
      error: describeError(error.cause),
    });
  }
  return error;
}

function countResult({ metrics }: UnitOfWorkRuntime, result: HandleResult, timerDelivery: boolean): void {
  const type = result.sagaType;
  if (timerDelivery && result.outcome === HANDLE_OUTCOMES.IGNORED) metrics.add('timersDiscarded', type);
  if (result.outcome === HANDLE_OUTCOMES.STARTED) metrics.add('started', type);
  if (result.outcome === HANDLE_OUTCOMES.HANDLED) metrics.add('handled', type);
  if (result.reason === IGNORE_REASONS.NO_INSTANCE) metrics.add('ignoredNoInstance', type);
  if (result.reason === IGNORE_REASONS.COMPLETED) metrics.add('ignoredCompleted', type);
  if (result.outcome === HANDLE_OUTCOMES.STALE) metrics.add('timersStale', type);
  if (result.outcome === HANDLE_OUTCOMES.DUPLICATE) metrics.add('duplicates', type);
  metrics.add('timersScheduled', type, result.timersScheduled);
  metrics.add('timersCancelled', type, result.timersCancelled);
  metrics.add('messagesSent', type, result.messagesSent);
}

/** The error of a message whose conflicts outlasted `concurrency.maxAttempts`. */
function concurrencyError(
  dialect: DialectAdapter,
  unit: UnitOfWork,
  error: RetryableConflict,
  { attempts, conflicts }: { readonly attempts: number; readonly conflicts: number },
): SagaConcurrencyError {
  const sagaType = unit.saga.definition.name;
  const messageType = unit.message.type;
  return new SagaConcurrencyError(
    'CONCURRENCY_CONFLICT',
    `Saga ${sagaType}${error.sagaId ? `/${error.sagaId}` : ''}: message '${messageType}' met ${conflicts} concurrency conflicts in a row (${lastConflict(error.cause, dialect)}); nothing of it was written. Retry the message later, or raise concurrency.maxAttempts${conflictKind(error.cause) === 'lock wait' ? RAISE_TOO[dialect.name] : ''}.`,
    { sagaType, sagaId: error.sagaId, messageType, attempts },
    { cause: error.cause },
  );
}

/** The wording of a run of conflicts' last one, for the message of a {@link SagaConcurrencyError}. */
function lastConflict(cause: unknown, dialect: DialectAdapter): string {
  const kind = conflictKind(cause);
  return kind === 'lock wait' ? LAST_CONFLICT[kind][dialect.name] : LAST_CONFLICT[kind];
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
