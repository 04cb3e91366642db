import type { EntityManager } from '@mikro-orm/core';
import type { SagaState } from '../../entities/saga-state.js';
import { SagaError, SagaValidationError } from '../../errors.js';
import { computeChangeSetsOnce } from '../../orm/index.js';
import { TIMER_SCOPES } from '../../timers/timer-plan.js';
import { type RegisteredSaga, readStep } from '../registered-saga.js';
import type { SagaMessage } from '../saga-message.js';
import { type FiringTimer, RecordingStepContext } from '../step-context.js';
import { checkStepValue } from '../step-value.js';
import { isStackOverflow, jsonPropertiesOf } from '../stored-values.js';
import type { LoadedInstance } from './load-instance.js';

/** What the step decided: the context's record plus what changed on the state entity. */
export interface StepRun {
  /** The timers, messages and completion the step asked for. */
  readonly ctx: RecordingStepContext;
  /** Whether any column of the state row changed (MikroORM's change set, completion included). */
  readonly changed: boolean;
  /** Whether the saga is completed after the step (before it, or by `ctx.complete()`). */
  readonly completed: boolean;
  /** The value of the definition's `stepProperty` after the step, or null. */
  readonly step: string | null;
}

/** The unit of work's facts the step context exposes. */
export interface StepInput {
  readonly now: Date;
  readonly correlationId: string;
  readonly timer: FiringTimer | undefined;
}

/**
 * Phase 2 of a unit of work: runs the step of `messageType` on the loaded instance with `message` (a copy
 * of its own), outside any transaction and without the EntityManager, stamps completion, and asks MikroORM what changed. Writes nothing; a step that
 * throws propagates its error and leaves nothing to write.
 */
export async function runStep(
  em: EntityManager,
  saga: RegisteredSaga,
  instance: LoadedInstance,
  messageType: string,
  message: SagaMessage,
  input: StepInput,
): Promise<StepRun> {
  const { definition } = saga;
  const { state } = instance;
  const facts = { sagaType: definition.name, sagaId: state.id, isNew: instance.isNew, completed: instance.before.completed };
  const ctx = new RecordingStepContext({ ...facts, ...input }, saga.settings);
  const run = definition.steps.get(messageType)!;
  const owned = runtimeColumnsOf(state);
  try {
    await run(state, message, ctx);
  } finally {
    ctx.close();
  }
  assertRuntimeColumnsUnchanged(definition.name, state, owned);
  if (ctx.completed && !state.completedAt) state.completedAt = input.now;
  if (!ctx.completed && state.completedAt) state.completedAt = null; // reopened
  const changeSets = changeSetsOf(em, saga, state);
  saga.checkStateValues(state, changeSets, definition.name, state.id);
  const completed = state.completedAt != null; // undefined under forceUndefined: not completed
  const step = readStep(state, definition.stepProperty);
  // Step-scoped timers store the step value in saga_timer.step (null without a stepProperty).
  const scheduled = completed ? [] : ctx.timers.scheduled;
  checkStepValue(
    step,
    scheduled.some((t) => t.scope === TIMER_SCOPES.STEP),
    definition.name,
    state.id,
  );
  return { ctx, changed: changeSets.length > 0, completed, step };
}

/**
 * MikroORM's change sets of the state. It writes each JSON value to text with `JSON.stringify` to compare it,
 * which overflows JavaScript's call stack past about 4,000 levels of nesting: refused as the step's value.
 * @throws SagaValidationError `STATE_VALUE_INVALID` naming the JSON properties.
 */
function changeSetsOf(em: EntityManager, saga: RegisteredSaga, state: SagaState) {
  try {
    return computeChangeSetsOnce(em, state);
  } catch (error) {
    if (!isStackOverflow(error)) throw error;
    const sagaType = saga.definition.name;
    const properties = jsonPropertiesOf(saga.meta).map((p) => p.name);
    throw new SagaValidationError(
      'STATE_VALUE_INVALID',
      `A step of saga ${sagaType}/${state.id} set ${properties.length > 0 ? `JSON property ${properties.join(' or ')}` : 'a property'} to a value nested too deep for MikroORM to write (its JSON.stringify overflowed the call stack). Nothing was written; keep state JSON a few hundred levels deep at most.`,
      { sagaType, sagaId: state.id },
      { cause: error },
    );
  }
}

/** The columns the runtime owns: a step may read them, never change them (a new `id` would orphan the timers). */
export const RUNTIME_COLUMNS = ['id', 'version', 'createdAt', 'updatedAt', 'completedAt'] as const;

type RuntimeColumnValues = Record<(typeof RUNTIME_COLUMNS)[number], unknown>;

/** The values as read; a Date is copied, so changing it in place (`setTime`) counts as a change. */
function runtimeColumnsOf(state: SagaState): RuntimeColumnValues {
  const values = {} as RuntimeColumnValues;
  for (const column of RUNTIME_COLUMNS) {
    const value: unknown = state[column];
    values[column] = value instanceof Date ? new Date(value.getTime()) : value;
  }
  return values;
}

/** Two Dates are the same when their times are; anything else (a number of the same time included) by identity. */
function sameValue(before: unknown, after: unknown): boolean {
  if (before instanceof Date && after instanceof Date) return Object.is(before.getTime(), after.getTime());
  return Object.is(before, after);
}

function assertRuntimeColumnsUnchanged(sagaType: string, state: SagaState, before: RuntimeColumnValues): void {
  const changed = RUNTIME_COLUMNS.filter((column) => !sameValue(before[column], state[column]));
  if (changed.length === 0) return;
  throw new SagaValidationError(
    'STATE_COLUMN_READONLY',
    `A step of saga ${sagaType}/${String(before.id)} changed ${changed.join(', ')}, which the runtime owns; nothing was written. Keep your data in your own properties, and complete the saga with ctx.complete() (reopen it with ctx.reopen()).`,
    { sagaType, sagaId: String(before.id), columns: changed },
  );
}

/**
 * Seals what was checked: the returned function throws `CONTEXT_CLOSED` when the state entity changed since
 * (a callback or promise the step did not await kept writing to it), so the flush never writes a value that
 * the runtime-column and state-value checks did not see. Compares MikroORM's own snapshot of the entity.
 */
export function sealState(em: EntityManager, sagaType: string, state: SagaState): () => void {
  const snapshot = () =>
    JSON.stringify(em.getComparator().prepareEntity(state), (_, value) => (typeof value === 'bigint' ? `${value}n` : value));
  const checked = snapshot();
  return () => {
    if (snapshot() === checked) return;
    throw new SagaError(
      'CONTEXT_CLOSED',
      `The state of saga ${sagaType}/${state.id} changed after its step returned (a callback or promise the step did not await); nothing was written. Await everything a step starts before it returns.`,
      { sagaType, sagaId: state.id },
    );
  };
}
