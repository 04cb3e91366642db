import type { EntityManager } from '@mikro-orm/core';
import { executeSql } from './sql-execution.js';
import type { JoinedTransaction, SqlStatement, StatementAnswer } from './unit-transaction.js';

/*
 * A unit of work inside a transaction the application has open (an EntityManager inside `em.transactional()`, or
 * after `em.begin()`), on either major: the unit's fork takes the application's transaction context, so every
 * statement of the unit goes on the application's connection (SQLite's only one included), and a SAVEPOINT of the
 * library's own marks where the unit's statements roll back to. The savepoint statements are plain SQL, the same on
 * PostgreSQL and SQLite, sent through the transaction context (knex's transaction on 6, kysely's on 7): they fire
 * none of MikroORM's transaction events. The application's transaction fires its own when the application ends it.
 */

/** The savepoint of a joined unit. One joined unit at a time runs in one transaction (the runtime refuses a second). */
const SAVEPOINT = 'mikro_orm_saga_unit';

/**
 * Makes `unitEm` (a unit of work's fresh fork) run its statements in `context`, the application's open transaction,
 * and sets the unit's savepoint there. For a major's `UnitTransactions.join`, once `isOpen` (how that major tells
 * whether `context` is still open) found it open. Rejects with the driver's error, with `unitEm` out of the
 * transaction, when SAVEPOINT fails (a PostgreSQL transaction a failed statement aborted, a lost connection).
 */
export async function joinOpenTransaction(context: object, unitEm: EntityManager, isOpen: () => boolean): Promise<JoinedTransaction> {
  unitEm.setTransactionContext(context as never);
  try {
    await executeSql(unitEm, `savepoint ${SAVEPOINT}`, [], 'run');
  } catch (error) {
    unitEm.resetTransactionContext();
    throw error;
  }
  return new JoinedUnitTransaction(unitEm, context, isOpen);
}

/** The transaction of a joined unit (see `JoinedTransaction`). */
class JoinedUnitTransaction implements JoinedTransaction {
  readonly committedWithStatement = false;
  readonly foldsStatements = false;

  constructor(
    readonly em: EntityManager,
    readonly context: object,
    private readonly isOpen: () => boolean,
  ) {}

  get open(): boolean {
    return this.isOpen();
  }

  /** RELEASE SAVEPOINT; `em` then leaves the application's transaction (not when it failed: roll back then). */
  async commit(): Promise<void> {
    await this.send(`release savepoint ${SAVEPOINT}`);
    this.leave(this.em);
  }

  /** ROLLBACK TO SAVEPOINT, then RELEASE SAVEPOINT; `em` leaves the application's transaction even when they fail. */
  async rollback(): Promise<void> {
    try {
      await this.undo();
      await this.send(`release savepoint ${SAVEPOINT}`);
    } finally {
      this.em.getUnitOfWork(false).clearActionsQueue(); // as em.rollback() does
      this.leave(this.em);
    }
  }

  undo(): Promise<void> {
    return this.send(`rollback to savepoint ${SAVEPOINT}`);
  }

  /** Never: the COMMIT is the application's. */
  commitWithNextStatement(): boolean {
    return false;
  }

  async sendWithNextStatement(sql: string, via: EntityManager = this.em): Promise<void> {
    await executeSql(via, sql, [], 'run');
  }

  withdrawUnsent(): boolean {
    return false;
  }

  runStatementsTogether(_statements: readonly SqlStatement[]): Promise<readonly StatementAnswer[]> {
    return Promise.reject(new Error("a joined unit's statements are sent one at a time"));
  }

  join(other: EntityManager): void {
    other.setTransactionContext(this.context as never);
  }

  leave(other: EntityManager): void {
    other.resetTransactionContext();
  }

  private async send(sql: string): Promise<void> {
    await executeSql(this.em, sql, [], 'run');
  }
}
