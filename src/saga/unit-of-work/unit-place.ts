import type { EntityManager } from '@mikro-orm/core';
import { freshFork } from '../../orm/index.js';
import type { RowsDue } from '../rows-due.js';
import { type FailureProbes, ownTransactionProbes } from './classify-failure.js';
import type { UnitOfWorkPlan } from './unit-of-work-plan.js';
import type { UnitWrite } from './unit-write.js';
import type { UnitWriter } from './unit-writer.js';
import type { WriteReport } from './write-plan.js';

/**
 * Where a unit of work runs: the EntityManager an attempt reads through, who writes its plan, who hears that it
 * committed, and where the reads that explain a failure run. The runtime's own place ({@link ownPlace}) gives each
 * attempt a fresh fork and writes it in a transaction of its own or a group's; a joined place runs the unit inside
 * the application's open transaction (`joined-unit.ts`).
 */
export interface UnitPlace {
  /** The EntityManager of one attempt: a fresh fork, whose identity map holds the unit's instance. */
  fork(): EntityManager;
  /** Writes the write phase of `unit`; `alone`: it left a group for a row another transaction held. */
  write(unit: UnitWrite, alone: boolean): Promise<WriteReport>;
  /** Hears that the write of `plan`, planned at `now`, is done. */
  written(plan: UnitOfWorkPlan, now: Date): void;
  /** Where the reads that explain a failure run. */
  readonly probes: FailureProbes;
  /** Whether a failed unit's writes are rolled back to a savepoint of the application's transaction. */
  readonly joined: boolean;
}

/**
 * The runtime's own place: each attempt on a fresh fork of `em`, written by `writer` (a group's transaction, or one of
 * its own), committed when the write returns: `rowsDue` then wakes the dispatchers.
 */
export function ownPlace(em: EntityManager, writer: UnitWriter, rowsDue: RowsDue): UnitPlace {
  return {
    fork: () => freshFork(em),
    write: (unit, alone) => writer.write(unit, alone),
    written: (plan, now) => rowsDue.committed(plan, now),
    probes: ownTransactionProbes(em),
    joined: false,
  };
}
