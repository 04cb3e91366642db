import { type EntityManager, EventType, type TransactionEventType } from '@mikro-orm/core';
import { COMMIT_SQL, type ConnectionHold, type EndHold, type HeldTransaction, runTogether } from './held-transaction.js';
import { assertOrmOpen, untilOrmClosed } from './orm-close-watch.js';
import { executeSql, logQuery } from './sql-execution.js';
import {
  CommitNotSent,
  CommitRolledBack,
  CommitSubscriberThrew,
  type SqlStatement,
  type StatementAnswer,
  type UnitTransaction,
} from './unit-transaction.js';

/**
 * Opens a unit transaction on `em` for a major's `UnitTransactions.begin`: `hold` takes a connection from the pool
 * and makes it `em`'s transaction context; without one, MikroORM's own `em.begin()` opens the transaction. The
 * transaction events fire as MikroORM's own `em.begin()` fires them; when an afterTransactionStart subscriber
 * throws, the transaction is rolled back and the error passes on. Rejects with `OrmClosed` once the ORM was closed,
 * while it waits for a connection too (a connection the pool hands out after that goes straight back).
 */
export async function openUnitTransaction(em: EntityManager, hold?: () => Promise<ConnectionHold>): Promise<UnitTransaction> {
  assertOrmOpen(em);
  if (!hold) {
    await em.begin();
    return new HeldUnitTransaction(em, undefined);
  }
  await dispatchTransactionEvent(em, EventType.beforeTransactionStart);
  const transaction = new HeldUnitTransaction(em, await untilOrmClosed(em, hold(), (late) => late.end()));
  try {
    await dispatchTransactionEvent(em, EventType.afterTransactionStart);
  } catch (error) {
    await transaction.rollback().catch(() => undefined);
    throw error;
  }
  return transaction;
}

/**
 * Fires a transaction event for `em`'s subscribers the way MikroORM's own `em.begin()` does; `transaction` for the
 * events after the transaction's end, when `em` no longer holds it.
 */
async function dispatchTransactionEvent(
  em: EntityManager,
  event: TransactionEventType,
  transaction: unknown = em.getTransactionContext(),
): Promise<void> {
  await em.getEventManager().dispatchEvent(event, { em, uow: em.getUnitOfWork(false), transaction: transaction as never });
}

/** The events of a transaction's end: while a subscriber listens to one, COMMIT is never sent with a statement. */
const END_EVENTS = [
  EventType.beforeTransactionCommit,
  EventType.afterTransactionCommit,
  EventType.beforeTransactionRollback,
  EventType.afterTransactionRollback,
] as const;

/**
 * A unit's transaction on `em`: on a connection the library holds (`hold`: its statements sent by the library
 * itself when `hold.held` is set, by kysely's connection otherwise), or MikroORM's own `em.begin()` (no `hold`).
 */
class HeldUnitTransaction implements UnitTransaction {
  /** Lets go of the held connection; unset once it has (then `em` is outside any transaction). */
  private endHold: EndHold | undefined;
  private readonly state: HeldTransaction | undefined;

  constructor(
    readonly em: EntityManager,
    hold: ConnectionHold | undefined,
  ) {
    this.endHold = hold?.end;
    this.state = hold?.held;
  }

  /** The held transaction's state while `context` is its transaction context. */
  private heldAt(context: unknown): HeldTransaction | undefined {
    return this.state !== undefined && context === this.state.context ? this.state : undefined;
  }

  /** The held transaction's state while it is `em`'s transaction (not before BEGIN, nor after its end). */
  private get held(): HeldTransaction | undefined {
    return this.heldAt(this.em.getTransactionContext());
  }

  async commit(): Promise<void> {
    const em = this.em;
    if (!this.endHold) return em.commit();
    const context = em.getTransactionContext();
    try {
      await dispatchTransactionEvent(em, EventType.beforeTransactionCommit);
    } catch (error) {
      throw new CommitNotSent(error);
    }
    const held = this.heldAt(context);
    if (held) {
      // A transaction that never sent a statement never sent BEGIN either: there is nothing to commit. One whose
      // statement carried COMMIT (commitWithNextStatement) is committed already.
      held.pending = [];
      if (!held.beginPending && !held.committed) {
        // Its answer is read by the transaction client, whatever text an `onQuery` hook made of the statement.
        held.commitSending = true;
        try {
          await executeSql(em, COMMIT_SQL, [], 'run');
        } finally {
          held.commitSending = false;
        }
      } else if (held.committed && held.foldsStatements) {
        // A COMMIT that went with the statement (PostgreSQL) is logged now, after it (SQLite sent none: autocommit).
        logQuery(em, COMMIT_SQL);
      }
      // PostgreSQL answers COMMIT of a transaction a failed statement aborted with ROLLBACK, not an error.
      if (held.committedAs === 'ROLLBACK') throw new CommitRolledBack();
    } else await (em.getConnection('write') as unknown as { commit(context: unknown): Promise<void> }).commit(context);
    this.endConnectionHold();
    try {
      await dispatchTransactionEvent(em, EventType.afterTransactionCommit, context);
    } catch (error) {
      throw new CommitSubscriberThrew(error);
    }
  }

  /**
   * See `UnitTransaction.rollback`. On MikroORM 6, when ROLLBACK itself could not be sent or failed, the connection
   * is marked broken and knex's pool validation destroys it instead of handing it out again (closing it ends the
   * transaction on the database).
   */
  async rollback(): Promise<void> {
    const em = this.em;
    let ended = false;
    try {
      const context = em.getTransactionContext();
      const held = this.heldAt(context);
      if (!held && !this.endHold) {
        // Opened by MikroORM's own em.begin() (see openUnitTransaction).
        await em.rollback();
        ended = true;
        return;
      }
      let subscriberError: { readonly error: unknown } | undefined;
      try {
        await dispatchTransactionEvent(em, EventType.beforeTransactionRollback);
      } catch (error) {
        subscriberError = { error };
      }
      // A transaction that never sent a statement never sent BEGIN either: there is nothing to roll back.
      if (held) held.pending = [];
      if (held && !held.beginPending && !held.committed) await executeSql(em, 'rollback', [], 'run');
      // MikroORM 7 (the transaction kysely's connection hold opened): its connection sends ROLLBACK, without events.
      if (!held) await (em.getConnection('write') as unknown as { rollback(context: unknown): Promise<void> }).rollback(context);
      ended = true;
      em.getUnitOfWork(false).clearActionsQueue(); // as em.rollback() does
      // As after COMMIT: the connection goes back before the event, whose statements run outside the transaction.
      this.endConnectionHold();
      if (subscriberError) throw subscriberError.error;
      await dispatchTransactionEvent(em, EventType.afterTransactionRollback, context);
    } finally {
      this.endConnectionHold(!ended);
    }
  }

  /**
   * Hands the connection of the transaction back to the pool; `em` is then outside any transaction. `broken`:
   * neither COMMIT nor ROLLBACK ended the transaction.
   */
  private endConnectionHold(broken = false): void {
    const endHold = this.endHold;
    if (!endHold) return;
    this.endHold = undefined;
    // After a failed ROLLBACK, MikroORM still holds the dead transaction: the fork must not run queries on it.
    this.em.resetTransactionContext();
    endHold(broken);
  }

  commitWithNextStatement(): boolean {
    const held = this.held;
    if (!held?.beginPending || held.commitPending) return false;
    const subscribers = [...this.em.getEventManager().getSubscribers()] as Record<string, unknown>[];
    if (subscribers.some((s) => END_EVENTS.some((event) => typeof s[event] === 'function'))) return false;
    held.commitPending = true;
    return true;
  }

  get committedWithStatement(): boolean {
    return this.held?.committed === true;
  }

  get foldsStatements(): boolean {
    return this.held?.foldsStatements === true;
  }

  async sendWithNextStatement(sql: string, via: EntityManager = this.em): Promise<void> {
    const held = this.heldAt(via.getTransactionContext());
    if (!held?.foldsStatements) return void (await executeSql(via, sql, [], 'run'));
    // MikroORM's query log shows it as if sent on its own, when it is sent (`takeUnsent`).
    held.pending.push(sql);
  }

  withdrawUnsent(sql: string): boolean {
    const held = this.held;
    const index = held?.pending.lastIndexOf(sql) ?? -1;
    if (index < 0) return false;
    held!.pending.splice(index, 1);
    return true;
  }

  runStatementsTogether(statements: readonly SqlStatement[]): Promise<readonly StatementAnswer[]> {
    return runTogether(this.em, this.held, statements);
  }

  join(other: EntityManager): void {
    other.setTransactionContext(this.em.getTransactionContext());
  }

  leave(other: EntityManager): void {
    other.resetTransactionContext();
  }
}
