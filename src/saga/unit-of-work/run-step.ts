import type { EntityManager } from '@mikro-orm/core';
import type { SagaMessage } from '../define-saga.js';
import { type RegisteredSaga, readStep } from '../registered-saga.js';
import { type FiringTimer, RecordingStepContext } from '../step-context.js';
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
 * Phase 2 of a unit of work: runs the step on the loaded instance, outside any transaction and without
 * the EntityManager, stamps completion, and asks MikroORM what changed. Writes nothing; a step that
 * throws propagates its error and leaves nothing to write.
 */
export async function runStep(
  em: EntityManager,
  saga: RegisteredSaga,
  instance: LoadedInstance,
  message: SagaMessage,
  input: StepInput,
): Promise<StepRun> {
  const { definition } = saga;
  const { state } = instance;
  const ctx = new RecordingStepContext(
    definition.name,
    state.id,
    instance.isNew,
    input.now,
    input.correlationId,
    input.timer,
    saga.settings,
  );
  const step = definition.steps.get(message.type)!;
  try {
    await step(state, message, ctx);
  } finally {
    ctx.close();
  }
  if (ctx.completed && !state.completedAt) state.completedAt = input.now;
  const uow = em.getUnitOfWork();
  uow.computeChangeSets();
  return {
    ctx,
    changed: uow.getChangeSets().length > 0,
    completed: state.completedAt !== null,
    step: readStep(state, definition.stepProperty),
  };
}
