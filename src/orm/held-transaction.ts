import type { EntityManager } from '@mikro-orm/core';
import { executeSql } from './sql-execution.js';
import type { SqlStatement, StatementAnswer } from './unit-transaction.js';

/*
 * The state of a unit's transaction the library holds on a pooled connection itself (MikroORM 6 through knex, and
 * MikroORM 7 on PostgreSQL through pg: see `mikro-orm-6/knex-held-transaction.ts` and
 * `mikro-orm-7/pg-held-transaction.ts`), shared by both.
 */

/** One unit's transaction on a pooled connection, and the transaction context MikroORM is given for it. */
export interface HeldTransaction {
  /** What `em.getTransactionContext()` returns while the transaction is open. */
  readonly context: object;
  /** Whether the transaction is open; statements sent through `context` otherwise fail. */
  open: boolean;
  /** Whether statements go with the next one, in one round trip (PostgreSQL's simple query protocol). */
  readonly foldsStatements: boolean;
  /** PostgreSQL: BEGIN is not sent yet; the next statement sent through `context` carries it. */
  beginPending: boolean;
  /** Statements to send before the next one, with it (`sendWithNextStatement`). */
  pending: string[];
  /** Writes a statement that waited (BEGIN, a SAVEPOINT, a lock bound) to MikroORM's query log when it is sent. */
  readonly log: (sql: string) => void;
  /** The command tag the database answered COMMIT with (PostgreSQL: `ROLLBACK` when the transaction had aborted). */
  committedAs?: string;
  /** COMMIT goes with the next statement, which is the transaction's only one (`commitWithNextStatement`). */
  commitPending: boolean;
  /** COMMIT went with the transaction's statement: the transaction has ended on the database. */
  committed: boolean;
  /** The unit's commit is sending COMMIT: the next statement's answer is COMMIT's (`committedAs`). */
  commitSending: boolean;
  /**
   * MikroORM 7: the answers to the statements of the last string sent, one per statement, without those that went
   * with it (BEGIN, what waited, COMMIT); MikroORM's own result carries only one (`runStatementsTogether`).
   */
  answers?: readonly StatementAnswer[];
}

/** Lets go of a transaction's connection; `broken` when the transaction may still be open on it. */
export type EndHold = (broken?: boolean) => void;

/**
 * A transaction on a connection taken from the pool for it: how to hand the connection back and, when the
 * library sends the transaction's statements itself, their state.
 */
export interface ConnectionHold {
  readonly end: EndHold;
  readonly held?: HeldTransaction;
}

/** What the unit's commit sends; the held transaction's client reads the answer to it. */
export const COMMIT_SQL = 'commit';

/** The message of a statement sent in a held transaction after it ended. */
export const TRANSACTION_ENDED = "The unit of work's transaction has ended: no statement can run in it.";

/** The statements waiting to go before the next one (BEGIN first, when not sent yet); they are taken: sent now. */
export function takeUnsent(held: HeldTransaction): string[] {
  const unsent = held.beginPending ? ['begin', ...held.pending] : held.pending;
  held.beginPending = false;
  held.pending = [];
  for (const sql of unsent) held.log(sql);
  return unsent;
}

/**
 * Sends `statements` to the database in one round trip, in `em`'s transaction (`held`, with what waits to go with
 * the next statement, when the library holds it; none for a statement outside a transaction), and answers each
 * with its row count and rows (see `UnitTransaction.runStatementsTogether`).
 */
export async function runTogether(
  em: EntityManager,
  held: HeldTransaction | undefined,
  statements: readonly SqlStatement[],
): Promise<readonly StatementAnswer[]> {
  // MikroORM formats parameters into the text it sends (`Platform.formatQuery`), after the config's `onQuery` hook
  // saw the SQL with its `?` placeholders: the statements go joined with all their parameters, so each value is
  // quoted as it would be sent alone and the string carries no parameters (one simple query), while a hook that
  // rewrites SQL text never sees (nor rewrites) a value, as for any statement sent alone.
  const sql = statements.map((statement) => statement.sql).join(';\n');
  const params = statements.flatMap((statement) => statement.params);
  if (held) held.answers = undefined;
  const answers = await executeSql<StatementAnswer[] | StatementAnswer>(em, sql, params, 'run');
  // MikroORM 7's result carries one answer; the held transaction kept them all.
  const list = held?.answers ?? (Array.isArray(answers) ? answers : [answers]);
  if (list.length !== statements.length) {
    throw new Error(`${statements.length} statements sent together were answered with ${list.length} results`);
  }
  return list;
}
