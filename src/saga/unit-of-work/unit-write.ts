import type { EntityManager } from '@mikro-orm/core';
import type { SagaRowTarget } from './planned-statement.js';
import type { UnitOfWorkPlan } from './unit-of-work-plan.js';

/** The write phase of one unit of work, ready to run: the step ran and its writes are planned. */
export interface UnitWrite {
  /** The unit of work's own fork; its flush runs in the group's transaction. */
  readonly em: EntityManager;
  readonly plan: UnitOfWorkPlan;
  readonly target: SagaRowTarget;
  /**
   * Where the unit takes its first row lock, compared element by element: a group writes its units in this
   * order, so concurrent groups (in this process or others) lock rows in one order and do not deadlock.
   */
  readonly lockKey: readonly string[];
}
