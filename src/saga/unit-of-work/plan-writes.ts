import { randomUUID } from 'node:crypto';
import type { TimerDelivery } from '../../contracts.js';
import { COLUMN_LIMITS, INBOX_OUTCOMES, type InboxOutcome, TIMER_OUTCOMES } from '../../entities/dispatch-states.js';
import { uuidV7 } from '../../ids/uuid-v7.js';
import type { OutboxWrite } from '../../sql/outbox-statements.js';
import type { TimerWrite } from '../../sql/timer-statements.js';
import { truncate } from '../../text/truncate.js';
import { type PlannedTimer, TIMER_SCOPES } from '../../timers/timer-plan.js';
import type { SagaMessage } from '../saga-message.js';
import type { StagedClaim } from './handle-target.js';
import type { LoadedInstance } from './load-instance.js';
import type { StepRun } from './run-step.js';
import { NO_TIMER_DELETES, type SagaRowWrite, type TimerDeletes, type UnitOfWorkPlan } from './unit-of-work-plan.js';

/** What {@link planWrites} decides from. */
export interface PlanInput {
  readonly sagaType: string;
  /** Whether the definition has a `stepProperty` (step-scoped timers). */
  readonly hasStepProperty: boolean;
  readonly instance: LoadedInstance;
  readonly run: StepRun;
  readonly message: SagaMessage;
  readonly timer: TimerDelivery | undefined;
  /** The staged delivery the message came from, stamped `delivered` with the unit of work. */
  readonly staged?: StagedClaim | undefined;
  readonly now: Date;
  readonly correlationId: string;
  /** The trace context current when the rows are written (the unit's `saga.step` span), stored on each; null for none. */
  readonly traceContext: string | null;
  /** The caller's message id, recorded with the unit of work; undefined when it gave none. */
  readonly messageId: string | undefined;
}

/**
 * Phase 3 of a unit of work: turns what the step decided into the rows to write. Pure: no I/O.
 * @returns undefined when there is nothing to write (no column changed, no timer, no message).
 */
export function planWrites(input: PlanInput): UnitOfWorkPlan | undefined {
  const { instance, run, now } = input;
  const { isNew, before } = instance;
  // A completed saga keeps no pending timers: completing removes them, and what a step of a completed
  // saga schedules is discarded.
  const scheduled = run.completed ? [] : run.ctx.timers.scheduled;
  const timerDeletes = isNew ? NO_TIMER_DELETES : deletesOf(input);
  const deletesAny = timerDeletes.all || timerDeletes.names.length > 0 || timerDeletes.otherStepsThan !== undefined;
  const { messageId } = input;
  // A message id is recorded even when nothing else changes, so the redelivery stays a duplicate; a delivering timer
  // or staged row is stamped, so it is not delivered again.
  if (
    !run.changed &&
    !input.timer &&
    !input.staged &&
    !deletesAny &&
    scheduled.length === 0 &&
    run.ctx.outgoing.length === 0 &&
    messageId === undefined
  ) {
    return undefined;
  }

  const sagaId = instance.state.id;
  const correlationId = truncate(input.correlationId, COLUMN_LIMITS.correlationId);
  const sagaRow: SagaRowWrite = isNew
    ? { kind: 'insert' }
    : run.changed
      ? { kind: 'update', loadedVersion: before.version, version: before.version + 1, updatedAt: now }
      : { kind: 'guard', loadedVersion: before.version };
  const timers = timerRows(input, scheduled, sagaId, correlationId);
  const outbox = outboxRows(input, sagaId, correlationId);
  return {
    sagaType: input.sagaType,
    sagaId,
    messageType: input.message.type,
    sagaRow,
    timerStamp: input.timer && {
      id: input.timer.id,
      token: input.timer.token,
      name: input.timer.name,
      outcome: TIMER_OUTCOMES.FIRED,
      at: now,
    },
    stagedStamp: input.staged && { ...input.staged, outcome: INBOX_OUTCOMES.DELIVERED, at: now },
    timerDeletes,
    timers,
    replaceTimers: !isNew,
    outbox,
    handledMessage:
      messageId === undefined
        ? undefined
        : { id: uuidV7(), sagaType: input.sagaType, sagaId, messageId, version: versionAfter(sagaRow), processedAt: now },
  };
}

/** The timer rows of the timers the step scheduled. */
function timerRows(input: PlanInput, scheduled: readonly PlannedTimer[], sagaId: string, correlationId: string): TimerWrite[] {
  const { run, now } = input;
  return scheduled.map((planned) => ({
    id: uuidV7(),
    sagaType: input.sagaType,
    sagaId,
    name: planned.name,
    step: planned.scope === TIMER_SCOPES.STEP && input.hasStepProperty ? run.step : null,
    dueAt: planned.dueAt,
    messageType: planned.messageType,
    payloadJson: planned.payloadJson,
    calendarKey: planned.calendarKey,
    correlationId,
    traceContext: input.traceContext,
    token: randomUUID(),
    createdAt: now,
  }));
}

/** The outbox rows of the messages the step sent. */
function outboxRows(input: PlanInput, sagaId: string, correlationId: string): OutboxWrite[] {
  return input.run.ctx.outgoing.map((out) => ({
    id: uuidV7(),
    sagaType: input.sagaType,
    sagaId,
    messageType: out.messageType,
    payloadJson: out.payloadJson,
    headersJson: JSON.stringify(out.headers),
    correlationId,
    traceContext: input.traceContext,
    token: randomUUID(),
    createdAt: input.now,
  }));
}

/**
 * The plan of a timer delivered to a saga that is gone or completed: only take the timer out of the
 * pending set, stamped `discarded` (token-checked), so it is not delivered again.
 */
export function planTimerRetirement(timer: TimerDelivery, messageType: string, now: Date): UnitOfWorkPlan {
  return {
    sagaType: timer.sagaType,
    sagaId: timer.sagaId,
    messageType,
    sagaRow: { kind: 'none' },
    timerStamp: { id: timer.id, token: timer.token, outcome: TIMER_OUTCOMES.DISCARDED, at: now },
    stagedStamp: undefined,
    timerDeletes: NO_TIMER_DELETES,
    timers: [],
    replaceTimers: false,
    outbox: [],
    handledMessage: undefined,
  };
}

/**
 * The plan of a staged delivery no step runs for: its message id was handled already (`duplicate`), or no instance
 * takes it (`ignored`). Only takes the row out of the pending set (token-checked), so it is not delivered again.
 */
export function planStagedRetirement(
  staged: StagedClaim,
  saga: { readonly sagaType: string; readonly sagaId: string | undefined },
  messageType: string,
  outcome: Extract<InboxOutcome, 'duplicate' | 'ignored'>,
  now: Date,
): UnitOfWorkPlan {
  return {
    sagaType: saga.sagaType,
    // No saga row is written; the id (none when no instance exists) only names the saga in messages.
    sagaId: saga.sagaId ?? '',
    messageType,
    sagaRow: { kind: 'none' },
    timerStamp: undefined,
    stagedStamp: { ...staged, outcome, at: now },
    timerDeletes: NO_TIMER_DELETES,
    timers: [],
    replaceTimers: false,
    outbox: [],
    handledMessage: undefined,
  };
}

/** The saga's version once `row` is written. */
function versionAfter(row: SagaRowWrite): number {
  switch (row.kind) {
    case 'update':
      return row.version;
    case 'guard':
      return row.loadedVersion;
    default:
      return 0;
  }
}

function deletesOf({ instance, run, hasStepProperty }: PlanInput): TimerDeletes {
  const completing = run.completed && !instance.before.completed;
  if (completing || run.ctx.timers.cancelsAll) return { all: true, names: [], otherStepsThan: undefined };
  const stepChanged = hasStepProperty && run.step !== instance.before.step;
  return { all: false, names: run.ctx.timers.cancelled, otherStepsThan: stepChanged ? { step: run.step } : undefined };
}
