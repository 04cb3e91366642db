import type { EntityManager, EntityMetadata } from '@mikro-orm/core';
import type { SagaState } from '../../entities/saga-state.js';
import type { UnitTransaction } from '../../orm/index.js';
import type { SqlStatement } from '../../sql/sql-executor.js';
import type { StatementOperation } from './write-failures.js';

/** One statement of a plan, named by what it does to which table. */
export interface PlannedStatement {
  readonly operation: StatementOperation;
  /** The table's name as MikroORM's metadata has it, for error messages. */
  readonly table: string;
  /**
   * Runs the statement inside the open transaction; returns the rows it deleted (0 for other statements). A
   * statement that {@link PlannedStatement.takesLockBound} is given the transaction's lock bound when it runs first,
   * and sends it (folded into its own SQL, or before it). `alone`: the transaction this statement is the only one
   * of, so it may carry that transaction's COMMIT (see `UnitTransaction.commitWithNextStatement`).
   */
  readonly run: (em: EntityManager, lockBound?: string, alone?: UnitTransaction) => Promise<number>;
  /** Whether `run` sends a lock bound it is given; the bound of a plan whose first statement does not is sent before it. */
  readonly takesLockBound?: boolean;
  /** A second table the statement writes (the saga row's UPDATE that also stamps the delivered timer). */
  readonly alsoTable?: string;
  /**
   * What `run` writes, as statements ready to be sent with other units' in one round trip instead; undefined when
   * they cannot be (MikroORM's flush writes the row). Only the saga row's statement has it: a plan of that statement
   * alone can be written so (`preparedWrite`).
   */
  readonly prepare?: (em: EntityManager) => PreparedWrite | undefined;
}

/**
 * A unit's write as statements of the library's own, to be sent with other units' ({@link PlannedStatement.prepare}):
 * the saga row's versioned UPDATE, and the delivered timer's stamp after it.
 */
export interface PreparedWrite {
  readonly statements: readonly SqlStatement[];
  /** The tables the statements write, quoted as in them. */
  readonly tables: readonly string[];
  /**
   * What the statements' answers (one each, in order) mean: `written`; `conflict` (another unit of work changed the
   * saga row first, and nothing was written); `partial` (one statement changed its row and the other did not: the
   * saga row without the stamp when the timer's claim was lost, or the reverse: the transaction must not commit it).
   */
  readonly read: (answers: readonly { readonly affectedRows: number }[]) => 'written' | 'conflict' | 'partial';
  /** Tells the unit's EntityManager the row was written, once the write stands (as `run` does after its statement). */
  readonly written: () => void;
  /** Undoes what preparing changed on the unit's state (its version): the statements are not sent, `run` will write it. */
  readonly cancel: () => void;
}

/** Where the plan's saga row lives: the managed entity and its metadata. */
export interface SagaRowTarget {
  readonly state: SagaState | undefined;
  readonly meta: EntityMetadata;
  /**
   * Throws when the state changed since the step's changes were checked (a callback the step did not await).
   * Called right before the flush, with nothing awaited in between.
   */
  readonly verifyUnchanged?: () => void;
}
