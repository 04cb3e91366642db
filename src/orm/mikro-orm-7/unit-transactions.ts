import type { EntityManager } from '@mikro-orm/core';
import { COMMIT_SQL, type ConnectionHold, runTogether } from '../held-transaction.js';
import { joinOpenTransaction } from '../joined-transaction.js';
import { openUnitTransaction } from '../open-unit-transaction.js';
import { executeSql, freshFork, queryRows } from '../sql-execution.js';
import { CommitRolledBack, type JoinedTransaction, type UnitTransaction, type UnitTransactions } from '../unit-transaction.js';
import type { KyselyLike } from './held-kysely.js';
import { holdPgTransaction, holdsPgTransactions } from './pg-held-transaction.js';

/*
 * The unit transactions of MikroORM 7. With PostgreSQL the library takes the connection from MikroORM's pg pool and
 * holds the transaction itself, as on 6 (`holdPgTransaction`): BEGIN goes with the first statement, COMMIT with the
 * only one when asked, and several statements go as one string. Elsewhere on 7 (SQLite; PostgreSQL with
 * `onCreateConnection`, `onReserveConnection` or `sessionContext: 'connection'`, which run statements as kysely hands
 * out a connection) the transaction's connection is held through kysely's `connection().execute()`, which hands the
 * connection back to the pool however the transaction ends. MikroORM 7's own `em.begin()` opens a kysely
 * `ControlledTransaction` (kysely 0.29.6), which releases its connection only after a BEGIN, COMMIT or ROLLBACK
 * that succeeded: when the connection drops at BEGIN, or at COMMIT (then ROLLBACK fails too), the pool slot leaks
 * and `orm.close()` waits for it forever. pg's pool destroys a released client whose connection failed instead
 * of reusing it. A transaction-scoped session context (`sessionContext: 'transaction'`) is applied by `em.begin()`
 * only: there MikroORM's own transaction is used.
 */

/** The slice of kysely (MikroORM 7's SQL client) that a unit's transaction uses. */
interface KyselyClient {
  connection(): { execute<T>(callback: (db: KyselyClient) => Promise<T>): Promise<T> };
  startTransaction(): { execute(): Promise<object> };
  /** A transaction kysely begins, and commits when `callback` resolves or rolls back when it throws. */
  transaction(): { execute<T>(callback: (transaction: KyselyClient) => Promise<T>): Promise<T> };
}

/** The unit transactions of MikroORM 7 (see above). */
export function mikroOrm7Transactions(): UnitTransactions {
  return new MikroOrm7Transactions();
}

class MikroOrm7Transactions implements UnitTransactions {
  /**
   * Whether transactions go on a connection the library holds ({@link holdsPgTransactions}), asked once; false from
   * the first time MikroORM refused to hand out its pool.
   */
  private holdsPg: boolean | undefined;

  begin(em: EntityManager): Promise<UnitTransaction> {
    const kysely = kyselyOf(em);
    if (!kysely || transactionSessionContextOf(em)) return openUnitTransaction(em);
    return openUnitTransaction(em, () => this.hold(em, kysely));
  }

  runsStatementsTogether(em: EntityManager): boolean {
    // Where begin() holds the transaction itself (not under a transaction-scoped session context).
    return !transactionSessionContextOf(em) && this.holdsPgTransactions(em, kyselyOf(em));
  }

  /**
   * BEGIN, the settings, the statement and COMMIT go as one string on a connection the library holds
   * ({@link queryRowsHeld}), or, where kysely must hand out the connection ({@link holdsPgTransactions}), in a
   * transaction of kysely's (its client), four round trips.
   */
  async queryRowsUnder<T>(em: EntityManager, settings: readonly string[], sql: string, params: readonly unknown[]): Promise<T[]> {
    if (settings.length === 0) return queryRows<T>(em, sql, params);
    const kysely = kyselyOf(em)!;
    if (this.holdsPgTransactions(em, kysely)) return this.queryRowsHeld<T>(em, kysely, settings, sql, params);
    // kysely's own transaction: BEGIN, then COMMIT (ROLLBACK after a failure) sent by its driver, never through
    // MikroORM's `onQuery` hook, so the connection never goes back to the pool inside the transaction (a hook that
    // threw on a COMMIT or ROLLBACK of the library's own did that: break16).
    return kysely.transaction().execute(async (transaction) => {
      // A fork whose statements go to the transaction's connection: MikroORM 7 runs a statement on its transaction context.
      const fork = freshFork(em);
      fork.setTransactionContext(transaction as never);
      try {
        await executeSql(fork, settings.join('; '), [], 'run');
        return await queryRows<T>(fork, sql, params);
      } finally {
        fork.resetTransactionContext();
      }
    });
  }

  /**
   * A kysely `ControlledTransaction` (MikroORM's, or a savepoint of a nested `em.transactional()`) is open until it
   * was committed or rolled back.
   */
  async join(appEm: EntityManager, unitEm: EntityManager): Promise<JoinedTransaction | undefined> {
    const context = appEm.getTransactionContext() as { isCommitted?: boolean; isRolledBack?: boolean } | undefined;
    const isOpen = () => context?.isCommitted !== true && context?.isRolledBack !== true;
    if (!context || !isOpen()) return undefined;
    return joinOpenTransaction(context, unitEm, isOpen);
  }

  /**
   * kysely's connection the context runs its statements on: a savepoint's context (kysely's `ControlledTransaction`
   * of a nested transaction) keeps no link to the transaction it is nested in, but hands out the same connection.
   */
  async connectionOf(appEm: EntityManager): Promise<object | undefined> {
    const context = appEm.getTransactionContext() as Partial<KyselyLike> | undefined;
    if (!context || typeof context.getExecutor !== 'function') return context;
    const provider = context.getExecutor() as { provideConnection?<T>(consumer: (connection: object) => Promise<T>): Promise<T> };
    return provider.provideConnection ? provider.provideConnection(async (connection) => connection) : context;
  }

  private holdsPgTransactions(em: EntityManager, kysely: KyselyClient | undefined): boolean {
    if (!kysely) return false;
    this.holdsPg ??= holdsPgTransactions(em, kysely as unknown as KyselyLike);
    return this.holdsPg;
  }

  /** A transaction the library holds on PostgreSQL ({@link holdPgTransaction}), kysely's elsewhere. */
  private async hold(em: EntityManager, kysely: KyselyClient): Promise<ConnectionHold> {
    return (this.holdsPgTransactions(em, kysely) && (await this.holdPg(em, kysely))) || holdTransaction(em, kysely);
  }

  /** {@link holdPgTransaction}; undefined, and no such hold asked for again, when MikroORM refuses its pool. */
  private async holdPg(em: EntityManager, kysely: KyselyClient): Promise<ConnectionHold | undefined> {
    const hold = await holdPgTransaction(em, kysely as unknown as KyselyLike);
    if (!hold) this.holdsPg = false;
    return hold;
  }

  /**
   * {@link queryRowsUnder} with PostgreSQL: BEGIN, `settings`, the statement and COMMIT in one string, on a connection
   * of MikroORM's pg pool the library holds, without transaction events. After a failure ROLLBACK is sent; when that
   * fails too (a hook refused it, the connection dropped) the pool closes the connection instead of handing it out
   * inside the transaction.
   */
  private async queryRowsHeld<T>(
    em: EntityManager,
    kysely: KyselyClient,
    settings: readonly string[],
    sql: string,
    params: readonly unknown[],
  ): Promise<T[]> {
    const fork = freshFork(em);
    const hold = await this.holdPg(fork, kysely);
    if (!hold) return this.queryRowsUnder(em, settings, sql, params);
    const held = hold.held!;
    let ended = false;
    try {
      held.commitPending = true;
      // As on MikroORM 6: the settings and the statement reach MikroORM (and its `onQuery` hook) as one string.
      const answers = await runTogether(fork, held, [...settings.map((setting) => ({ sql: setting, params: [] })), { sql, params }]);
      const rows = answers.at(-1)!.rows as T[];
      // Not folded (a statement with parameters of its own goes alone): COMMIT on its own.
      if (!held.committed) await executeSql(fork, COMMIT_SQL, [], 'run');
      ended = true;
      if (held.committed && held.committedAs !== 'COMMIT') throw new CommitRolledBack();
      return rows;
    } catch (error) {
      if (!ended) ended = await rolledBack(fork);
      throw error;
    } finally {
      hold.end(!ended);
    }
  }
}

/** `em`'s kysely client; undefined where MikroORM has none (not a SQL driver). */
function kyselyOf(em: EntityManager): KyselyClient | undefined {
  const client = (em.getConnection('write') as { getClient?(): unknown }).getClient?.() as Partial<KyselyClient> | undefined;
  return typeof client?.startTransaction === 'function' && typeof client.connection === 'function' ? (client as KyselyClient) : undefined;
}

/** The transaction-scoped session context of `em` (applied by `em.begin()` only). */
function transactionSessionContextOf(em: EntityManager): unknown {
  return (em as { getTransactionSessionContext?(): unknown }).getTransactionSessionContext?.();
}

/**
 * Takes a connection from the pool, opens a transaction on it as `em`'s transaction context, and keeps the
 * connection until the hold's `end` is called; then kysely hands it back to the pool. Rejects (with the
 * connection already back) when no connection can be had or BEGIN fails.
 */
function holdTransaction(em: EntityManager, kysely: KyselyClient): Promise<ConnectionHold> {
  let endHold!: () => void;
  const held = new Promise<void>((resolve) => {
    endHold = resolve;
  });
  return new Promise((began, failed) => {
    kysely
      .connection()
      .execute(async (db) => {
        em.setTransactionContext(await db.startTransaction().execute());
        began({ end: endHold });
        await held;
      })
      .catch(failed);
  });
}

/** Sends ROLLBACK in `em`'s transaction: whether it was answered. */
function rolledBack(em: EntityManager): Promise<boolean> {
  return executeSql(em, 'rollback', [], 'run').then(
    () => true,
    () => false,
  );
}
