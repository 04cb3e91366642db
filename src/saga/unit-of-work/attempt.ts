import type { EntityManager } from '@mikro-orm/core';
import type { TimerDelivery } from '../../contracts.js';
import type { DialectAdapter } from '../../dialect/dialect-adapter.js';
import { INBOX_OUTCOMES } from '../../entities/dispatch-states.js';
import type { SagaState } from '../../entities/saga-state.js';
import { untilOrmClosed } from '../../orm/index.js';
import type { DatabaseContext } from '../../sql/database-context.js';
import { findHandledMessage } from '../../sql/handled-message-statements.js';
import type { SagaMetrics } from '../../telemetry/saga-metrics.js';
import { HANDLE_OUTCOMES, type HandleResult } from '../handle-result.js';
import { type RegisteredSaga, readStep } from '../registered-saga.js';
import type { ResolvedSagaRuntimeOptions } from '../runtime-options.js';
import type { SagaMessage } from '../saga-message.js';
import { classifyFailure, type FailureContext, ormClosedError } from './classify-failure.js';
import { LeftGroup } from './group-commit.js';
import type { HandleTarget, StagedClaim } from './handle-target.js';
import { type IgnoredMessage, type LoadedInstance, loadInstance } from './load-instance.js';
import { planStagedRetirement, planTimerRetirement, planWrites } from './plan-writes.js';
import { runStep, type StepRun, sealState } from './run-step.js';
import type { UnitOfWorkPlan } from './unit-of-work-plan.js';
import type { UnitPlace } from './unit-place.js';
import { runNamed, StaleClaim } from './write-failures.js';
import type { WriteReport } from './write-plan.js';

/** What a unit of work uses of its runtime. */
export interface UnitOfWorkRuntime {
  readonly options: ResolvedSagaRuntimeOptions;
  /** The runtime's database context: the dialect, the transactions and every table's names. */
  readonly db: DatabaseContext;
  readonly dialect: DialectAdapter;
  readonly metrics: SagaMetrics;
  /** Where its attempts read and write: forks of the runtime's EntityManager, or the application's transaction. */
  readonly place: UnitPlace;
}

/** One message for one saga instance, as the retry loop hands it to each attempt. */
export interface UnitOfWork {
  readonly saga: RegisteredSaga;
  /** The runtime's copy of the message: its type is read and recorded from it; no saga code gets it. */
  readonly message: SagaMessage;
  /** A copy of the message of its own for one run of the step. */
  readonly stepMessage: () => SagaMessage;
  readonly target: HandleTarget;
  readonly correlationId: string;
  /** The stored text of the unit's `saga.step` span context, kept on the timers and outbox rows it writes. */
  readonly traceContext: string | null;
  /** Hears of the existing instance an attempt read (its `saga.step` span names it, also when the step then fails). */
  readonly found: (sagaId: string) => void;
}

/** Which attempt this is: its number (1 for the first), the conflicts before it, and whether it writes alone. */
export interface AttemptCount {
  readonly attempts: number;
  readonly conflicts: number;
  /** Whether it writes in a transaction of its own: it left a group for a row another transaction held. */
  readonly alone: boolean;
}

/** The fields of a result every outcome shares. */
type ResultBase = Pick<HandleResult, 'sagaType' | 'messageType' | 'attempts' | 'conflicts'>;

/** What a unit of work that wrote nothing did. */
const NO_EFFECTS = { changed: false, completed: false, timersScheduled: 0, timersCancelled: 0, messagesSent: 0 } as const;

/** One attempt as it runs: the unit of work, its own fork, its clock reading, and the result fields it shares. */
interface Attempt {
  readonly runtime: UnitOfWorkRuntime;
  readonly unit: UnitOfWork;
  readonly count: AttemptCount;
  readonly em: EntityManager;
  readonly now: Date;
  readonly timer: TimerDelivery | undefined;
  readonly base: ResultBase;
}

/**
 * One unit of work: load or ignore, run the step, plan the writes, write them in one transaction. The step runs
 * on `unit.stepMessage()`; `unit.message` is only read.
 * @throws RetryableConflict when another unit of work committed first (the retry loop runs it again).
 * @throws LeftGroup when its row stayed held past a group's lock timeout (it runs again, alone).
 */
export async function attempt(runtime: UnitOfWorkRuntime, unit: UnitOfWork, count: AttemptCount): Promise<HandleResult> {
  const { saga, message, target } = unit;
  const em = runtime.place.fork();
  const now = runtime.options.clock.now();
  const timer = target.kind === 'timer' ? target.timer : undefined;
  const base = { sagaType: saga.definition.name, messageType: message.type, attempts: count.attempts, conflicts: count.conflicts };
  const current: Attempt = { runtime, unit, count, em, now, timer, base };
  refuseOnClosedOrm(current, timer?.sagaId);
  const instance = await load(current);
  if (instance.kind === 'loaded' && !instance.isNew) unit.found(instance.state.id);
  const messageId = target.kind === 'correlation' ? target.messageId : undefined;
  const duplicate = messageId === undefined ? undefined : await duplicateOf(current, instance, messageId);
  if (duplicate) return retireStaged(current, duplicate, INBOX_OUTCOMES.DUPLICATE);
  if (instance.kind === 'ignored') return ignore(current, instance);
  return runAndWrite(current, instance, messageId);
}

/** The staged delivery the unit of work handles, if it came from one. */
function stagedOf({ unit }: Attempt): StagedClaim | undefined {
  return unit.target.kind === 'correlation' ? unit.target.staged : undefined;
}

/**
 * A staged delivery no step runs for (`duplicate`, `ignored`) leaves the pending set with that outcome, so it is not
 * delivered again; a claim lost meanwhile means another dispatcher's unit of work decides it (the outcome is `stale`).
 */
async function retireStaged(
  current: Attempt,
  result: HandleResult,
  outcome: typeof INBOX_OUTCOMES.DUPLICATE | typeof INBOX_OUTCOMES.IGNORED,
): Promise<HandleResult> {
  const staged = stagedOf(current);
  if (!staged) return result;
  const { runtime, unit, count, em, now } = current;
  const sagaId = result.sagaId ?? undefined;
  const plan = planStagedRetirement(staged, { sagaType: unit.saga.definition.name, sagaId }, unit.message.type, outcome, now);
  try {
    await runtime.place.write({ em, plan, target: { state: undefined, meta: unit.saga.meta }, lockKey: ['2', staged.id] }, count.alone);
  } catch (error) {
    if (!(error instanceof StaleClaim)) return failed(current, { sagaId, startedWith: undefined, timerNames: [] })(error);
    return { ...result, ...NO_EFFECTS, outcome: HANDLE_OUTCOMES.STALE };
  }
  return result;
}

/** Phase 1: the instance, read (or, on a timer's first attempt, taken from its batch's preload) or ignored. */
async function load(current: Attempt): Promise<LoadedInstance | IgnoredMessage> {
  const { unit, count, em, now, timer } = current;
  const { saga, message, target } = unit;
  // Only the first attempt may use a row read ahead: a retry follows a conflict, so it reads the row afresh.
  const preloaded =
    target.kind === 'timer' && count.attempts === 1 ? target.preload?.take(saga.definition.name, target.timer.sagaId) : undefined;
  const read = runNamed('read', saga.meta.tableName, async () => loadInstance(em, saga, message, target, now, await preloaded));
  // A read waiting for a connection when the ORM closes is left to end on its own (MikroORM 6's pool serves it no more).
  return untilOrmClosed(em, read, () => undefined).catch(
    failed(current, { sagaId: timer?.sagaId, startedWith: undefined, timerNames: [] }),
  );
}

/**
 * The `duplicate` result when the instance already handled `messageId`. Looked up before the ignore decision: the
 * redelivery of the message that completed the saga is a duplicate.
 */
async function duplicateOf(
  current: Attempt,
  instance: LoadedInstance | IgnoredMessage,
  messageId: string,
): Promise<HandleResult | undefined> {
  const { unit, em, base } = current;
  const existing = instance.kind === 'ignored' ? instance.state : instance.isNew ? null : instance.state;
  if (!existing) return undefined;
  const read = runNamed('read', current.runtime.db.tables.handledMessage.name, () =>
    findHandledMessage(current.runtime.db, em, unit.saga.definition.name, existing.id, messageId),
  );
  const handled = await untilOrmClosed(em, read, () => undefined).catch(
    failed(current, { sagaId: existing.id, startedWith: undefined, timerNames: [] }),
  );
  if (!handled) return undefined;
  return { ...result(HANDLE_OUTCOMES.DUPLICATE, base, existing, unit.saga, NO_EFFECTS), version: handled.version };
}

/** A message no step runs for. A timer for a saga that is gone or completed leaves the pending set, so it is not delivered again. */
async function ignore(current: Attempt, instance: IgnoredMessage): Promise<HandleResult> {
  const { runtime, unit, count, em, now, timer, base } = current;
  const { definition, meta } = unit.saga;
  if (timer) {
    const retirement = runtime.place.write(
      {
        em,
        plan: planTimerRetirement(timer, unit.message.type, now),
        target: { state: undefined, meta },
        lockKey: existingRowKey(definition.name, timer.sagaId),
      },
      count.alone,
    );
    await retirement.catch(ignoreStale).catch(failed(current, { sagaId: timer.sagaId, startedWith: undefined, timerNames: [] }));
  }
  const { reason, state } = instance;
  const ignored: HandleResult = state
    ? { ...result(HANDLE_OUTCOMES.IGNORED, base, state, unit.saga, { ...NO_EFFECTS, completed: true }), reason }
    : { ...base, ...NO_EFFECTS, outcome: HANDLE_OUTCOMES.IGNORED, reason, sagaId: timer?.sagaId ?? null, version: null, step: null };
  return retireStaged(current, ignored, INBOX_OUTCOMES.IGNORED);
}

/** Phases 2 to 4: runs the step, plans its writes and writes them in one transaction. */
async function runAndWrite(current: Attempt, instance: LoadedInstance, messageId: string | undefined): Promise<HandleResult> {
  const { unit, em, now, timer, base } = current;
  const { saga, message, correlationId } = unit;
  const { definition } = saga;
  const firing = timer && { id: timer.id, name: timer.name, dueAt: timer.dueAt, attempts: timer.attempts };
  const run = await runStep(em, saga, instance, message.type, unit.stepMessage(), { now, correlationId, timer: firing });
  const plan = planWrites({
    sagaType: definition.name,
    hasStepProperty: definition.stepProperty !== undefined,
    instance,
    run,
    message,
    timer,
    staged: stagedOf(current),
    now,
    correlationId,
    traceContext: unit.traceContext,
    messageId,
  });
  const verifyUnchanged = sealState(em, definition.name, instance.state);
  if (!plan) return result(HANDLE_OUTCOMES.HANDLED, base, instance.state, saga, { ...NO_EFFECTS, completed: run.completed });
  return write(current, instance, run, plan, verifyUnchanged);
}

/** Phase 4: writes `plan`; a timer whose claim was lost meanwhile makes the outcome `stale`, with nothing written. */
async function write(
  current: Attempt,
  instance: LoadedInstance,
  run: StepRun,
  plan: UnitOfWorkPlan,
  verifyUnchanged: () => void,
): Promise<HandleResult> {
  const { runtime, unit, count, em, base } = current;
  const { saga, target } = unit;
  const { definition, meta } = saga;
  const { state } = instance;
  // The ORM may have been closed while the step ran: nothing is written.
  refuseOnClosedOrm(current, state.id);
  let report: WriteReport;
  try {
    const lockKey = lockKeyOf(plan, definition.name, target);
    report = await runtime.place.write({ em, plan, target: { state, meta, verifyUnchanged }, lockKey }, count.alone);
  } catch (error) {
    if (!(error instanceof StaleClaim)) {
      const startedWith = instance.isNew && target.kind === 'correlation' ? { value: target.value } : undefined;
      return failed(current, { sagaId: state.id, startedWith, timerNames: plan.timers.map((t) => t.name) })(error);
    }
    const { version, step } = instance.before;
    return { ...base, ...NO_EFFECTS, outcome: HANDLE_OUTCOMES.STALE, sagaId: state.id, version, step };
  }
  runtime.place.written(plan, current.now);
  // Counted here, where it is known that this unit of work completed the saga (a late message handled on a
  // completed saga changes it too, and must not count it again).
  if (run.completed && !instance.before.completed) runtime.metrics.add('completed', definition.name);
  return result(instance.isNew ? HANDLE_OUTCOMES.STARTED : HANDLE_OUTCOMES.HANDLED, base, state, saga, {
    changed: run.changed,
    completed: run.completed,
    timersScheduled: plan.timers.length,
    timersCancelled: report.timersCancelled,
    messagesSent: plan.outbox.length,
  });
}

/** Throws `ORM_CLOSED` once `orm.close()` was called: a unit that has not begun writing never does. */
function refuseOnClosedOrm({ runtime, unit }: Attempt, sagaId: string | undefined): void {
  if (runtime.db.orm.closed) throw ormClosedError(unit.saga.definition.name, sagaId, unit.message.type);
}

/** Turns a failure of the attempt into what the caller sees (`classifyFailure`); a unit that left its group passes through. */
function failed(current: Attempt, context: Pick<FailureContext, 'sagaId' | 'startedWith' | 'timerNames'>) {
  const { runtime, unit } = current;
  return async (error: unknown): Promise<never> => {
    if (error instanceof LeftGroup) throw error;
    const { em } = runtime.options;
    const { probes, joined } = runtime.place;
    throw await classifyFailure(error, { em, probes, joined, db: runtime.db, saga: unit.saga, messageType: unit.message.type, ...context });
  };
}

function result(
  outcome: HandleResult['outcome'],
  base: ResultBase,
  state: SagaState,
  saga: RegisteredSaga,
  effects: Pick<HandleResult, 'changed' | 'completed' | 'timersScheduled' | 'timersCancelled' | 'messagesSent'>,
): HandleResult {
  return { ...base, ...effects, outcome, sagaId: state.id, version: state.version, step: readStep(state, saga.definition.stepProperty) };
}

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
  if (!(error instanceof StaleClaim)) throw error;
}
